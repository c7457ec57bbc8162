"""Reading a config: files, `DUCK_` environment variables and `a.b=value` overrides merged
into one document of dotted fields, validated into a pydantic model, every problem said in
one line (`ConfigError`); and the fields the serving profile's memory plan fills in
(`PLANNED`, `plan_fields`).

The model is duck.config.Config; this module does not import it (duck.config's load_config
and with_values pass it in), so the sections and their defaults stay in one file and the
machinery that reads them in another. Import these names from duck.config.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

import duck.config.profiles as profiles

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config that does not validate, said in one line (field, problem, value)."""


class Section(BaseModel):
    """A config section: strict (an unknown key is an error, never ignored), and checked
    again on every assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def parse_value(text: str) -> Any:
    """`3` → 3, `true` → True, `[1,2]` → [1, 2]; anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def one_line(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """pydantic's report as one line: `field: problem (got value)` for each problem; an unknown
    field of `model` with the known ones nearest its name ("did you mean")."""
    parts = []
    for e in error.errors():
        where = ".".join(str(x) for x in e["loc"]) or "config"
        if e["type"] == "extra_forbidden":
            parts.append(f"{where}: unknown field{did_you_mean(e['loc'], model)}")
        else:
            got = f" (got {e['input']!r})" if e["type"] != "missing" and not isinstance(e["input"], dict) else ""
            parts.append(f"{where}: {e['msg'].removeprefix('Value error, ')}{got}")
    return "; ".join(parts)


def did_you_mean(loc: tuple, model: type[BaseModel] | None) -> str:
    """` (did you mean play.max_actions?)`: the fields of `model` at `loc` nearest its last name."""
    from difflib import get_close_matches
    for name in loc[:-1]:
        field = model.model_fields.get(str(name)) if model else None
        model = field.annotation if field and isinstance(field.annotation, type) else None
    if model is None or not issubclass(model, BaseModel):
        return ""
    prefix = ".".join(str(x) for x in loc[:-1])
    near = get_close_matches(str(loc[-1]), list(model.model_fields), n=2)
    return f" (did you mean {' or '.join(f'{prefix}.{n}'.lstrip('.') for n in near)}?)" if near else ""


def set_dotted(doc: dict[str, Any], dotted: str, value: Any) -> None:
    """doc["a"]["b"] = value for "a.b", making the tables on the way."""
    *path, last = dotted.split(".")
    for key in path:
        doc = doc.setdefault(key, {})
    doc[last] = value


def unset_dotted(doc: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """`doc` without the dotted `keys` (those absent are skipped); returns `doc`."""
    for key in keys:
        *path, last = key.split(".")
        d = doc
        for k in path:
            d = d.get(k) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(last, None)
    return doc


def read_config_file(path: str | Path) -> dict[str, Any]:
    """One config file (TOML by its `.toml` suffix, else JSON) as a dict; a missing,
    unreadable or malformed file is a ConfigError naming the file and the problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        part = tomllib.loads(text) if str(path).endswith(".toml") else json.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path}: is a folder, not a file") from None
    except OSError as e:
        raise ConfigError(f"config file {path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path}: not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        kind = "TOML" if str(path).endswith(".toml") else "JSON (a .toml suffix reads TOML)"
        raise ConfigError(f"config file {path}: malformed {kind}: {e}") from None
    if not isinstance(part, dict):
        raise ConfigError(f"config file {path}: not a table of sections")
    return part


def gather(files: Iterable[str | Path] = (), overrides: Iterable[str] = (),
           env: dict[str, str] | None = None) -> dict[str, Any]:
    """Files in order (a later file's section replaces an earlier one's fields), then
    `DUCK_SECTION__FIELD` environment variables (`__` between nested names), then `a.b=value`
    overrides, as one document; an override without `=` is a ConfigError."""
    doc: dict[str, Any] = {}
    for f in files:
        for section, values in read_config_file(f).items():
            if isinstance(values, dict):
                doc.setdefault(section, {}).update(values)
            else:
                doc[section] = values
    for key, value in (os.environ if env is None else env).items():
        if key.startswith("DUCK_") and "__" in key:
            set_dotted(doc, key[5:].lower().replace("__", "."), parse_value(value))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form a.b=value")
        key, value = item.split("=", 1)
        set_dotted(doc, key.strip(), parse_value(value))
    return doc


def validate(model: type[M], doc: dict[str, Any]) -> M:
    """`model` from `doc`, or a ConfigError saying every problem in one line."""
    try:
        return model.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(one_line(e, model)) from None


# The fields the serving profile's memory plan (duck.config.profiles.plan) fills in when no file or
# override sets them, in the order run.json lists them: dotted name -> (the plan() keyword a
# set value is passed as, None where the plan does not take it; the planned value, from the
# plan and the profile). A config records which it planned (Config.derived), so that
# with_values and a resumed run (duck.run.info) unset them and plan them anew.
PLANNED: dict[str, tuple[str | None, Callable[[profiles.Plan, profiles.Profile], Any]]] = {
    "model.name": (None, lambda p, prof: p.served_name),
    "model.api_key_env": (None, lambda p, prof: prof.api_key_env),
    "model.serve.model_path": ("model_path", lambda p, prof: p.checkpoint),
    "model.serve.mtp_tokens": ("mtp_tokens", lambda p, prof: p.mtp_tokens),
    "model.serve.engram_offload": (None, lambda p, prof: prof.engram_offload),
    "model.serve.linear_backend": (None, lambda p, prof: prof.linear_backend),
    "model.serve.chat_template_family": (None, lambda p, prof: prof.chat_template),
    "model.serve.max_model_len": ("window", lambda p, prof: p.window),
    "model.serve.gpu_memory_utilization": ("utilization", lambda p, prof: p.utilization),
    "model.serve.max_num_seqs": ("max_num_seqs", lambda p, prof: p.max_num_seqs),
    "model.serve.kv_cache_dtype": ("kv_cache_dtype", lambda p, prof: p.kv_cache_dtype),
    "model.max_output_tokens": ("output_tokens", lambda p, prof: p.output_tokens),
    "agent.context_tokens": ("context_tokens", lambda p, prof: p.context_tokens),
    "scheduler.slots": ("slots", lambda p, prof: p.slots),
    "kernel.disk_mb": ("kernel_disk_mb", lambda p, prof: p.kernel_disk_mb),
}


def plan_fields(cfg: Any) -> tuple[tuple[str, ...], profiles.Plan]:
    """Plan `cfg` (a duck.config.Config, in its validator): the PLANNED fields a file or
    override set go into the plan, the others are set from it. Returns (the dotted names of
    those set, the plan); a plan that cannot be made is a ValueError."""
    spots = {}
    for dotted in PLANNED:
        *path, key = dotted.split(".")
        section = cfg
        for name in path:
            section = getattr(section, name)
        spots[dotted] = (section, key)
    given = {arg: getattr(section, key) for dotted, (section, key) in spots.items()
             if (arg := PLANNED[dotted][0]) and key in section.model_fields_set}
    serve = cfg.model.serve
    try:
        plan = profiles.plan(cfg.model.profile, gpu_mib=serve.gpu_memory_mib, low_water=cfg.agent.evict_to, **given)
    except profiles.ProfileError as e:
        raise ValueError(str(e)) from None
    profile = profiles.get(cfg.model.profile)
    derived = []
    for dotted, (section, key) in spots.items():
        if key not in section.model_fields_set:
            setattr(section, key, PLANNED[dotted][1](plan, profile))
            derived.append(dotted)
    return tuple(derived), plan
