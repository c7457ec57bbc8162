"""The two arms of an A/B experiment (duck.lab.ab.run): each arm's config from files and overrides,
the fields where two configs differ, and the options a policy gets for one unit (its config,
which model endpoint to start on, the pass)."""

from __future__ import annotations

from typing import Any

from duck.config import Config, load_config

ARMS = ("a", "b")


def load_arm(files: list[str], overrides: list[str] | None = None) -> Config:
    """An arm's config: files in order (e.g. the baseline, then one variant), then overrides."""
    return load_config(list(files), list(overrides or []))


def config_diff(a: Config, b: Config) -> list[dict[str, Any]]:
    """The fields where two configs differ (dotted names)."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    out = []
    for section in da:
        for k in sorted(set(da[section]) | set(db.get(section, {}))):
            va, vb = da[section].get(k), db.get(section, {}).get(k)
            if va != vb:
                out.append({"field": f"{section}.{k}", "a": va, "b": vb})
    return out


def same_experiment(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two dumped configs of one arm define the same experiment: everything but
    `model.urls`, which says where this machine's servers listen (shards on other nodes, or
    a shard resumed on another node, have other endpoints running the same model)."""
    def strip(c: dict[str, Any]) -> dict[str, Any]:
        return c | {"model": {k: v for k, v in c.get("model", {}).items() if k != "urls"}}
    return strip(a) == strip(b)


def policy_options(cfg: Config, *, unit_index: int = 0, pass_: int = 0) -> dict[str, Any]:
    """Keyword arguments of `make_policy` for one unit: the arm's config, which endpoint the
    unit starts on (`url_index`: the same for both arms of a pair, round robin over units) and
    the pass (`pass_`, which seeds the model's sampling)."""
    return {"config": cfg, "url_index": unit_index, "pass_": pass_}
