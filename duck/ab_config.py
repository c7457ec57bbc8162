"""The two arms of an A/B experiment (duck.ab): each arm's config from files and overrides,
the fields where two configs differ, and the options a policy gets for one unit (model
endpoints, which one to start on, the pass), given only to a policy whose constructor names
them."""

from __future__ import annotations

import inspect
from typing import Any

from duck.config import Config, load_config

ARMS = ("a", "b")
_POLICY_CLASSES = {"random": ("duck.policies", "RandomPolicy"), "explorer": ("duck.explorer", "Explorer"),
                   "llm": ("duck.agent", "AgentPolicy")}


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


def _ctor_params(policy: str) -> set[str]:
    mod, cls = _POLICY_CLASSES.get(policy, (None, None))
    if mod is None:
        return set()
    try:
        import importlib
        ctor = getattr(importlib.import_module(mod), cls)
        return {n for n, p in inspect.signature(ctor).parameters.items()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    except Exception:  # a policy module still being written: give it nothing extra
        return set()


def policy_options(cfg: Config, *, unit_index: int = 0, pass_: int = 0) -> dict[str, Any]:
    """Options for `make_policy`, given only to a policy whose constructor names them: the
    config (`config`, a Config), the model endpoints (`model_url`, the arm's `model.urls`),
    which endpoint this unit starts on (`url_index`: the same for both arms of a pair, round
    robin over units) and the pass (`pass_`)."""
    params = _ctor_params(cfg.play.policy)
    offered = {"config": cfg, "model_url": list(cfg.model.urls) or None, "url_index": unit_index,
               "pass_": pass_}
    return {k: v for k, v in offered.items() if k in params and v is not None}
