"""The results of an A/B experiment (duck.lab.ab.run): the ab.json document (duck.lab.stats.compare of the
two arms, with labels, the config difference and the plan) and report.html of an OUT folder;
`duck ab-merge` (gather the shard folders of one experiment and score them) and `duck
ab-stats` (the same document from any two sets of runs, or from one OUT folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from duck.lab.ab.config import ARMS, config_diff, same_experiment
from duck.lab.ab.scores import (_record_files, arm_scores, filter_passes, load_scores, pair_by_order,
                                parse_passes)
from duck.config import Config
from duck.lab.report.ab import ab_html
from duck.lab.stats import compare, pair_up
from duck.play.conversation import conversation_path, find_conversation
from duck.run import record_complete


def ab_document(out: Path, plan: dict[str, Any], *, n_boot: int = 10000, n_perm: int = 20000,
                seed: int = 0) -> dict[str, Any]:
    a, b = arm_scores(out, "a"), arm_scores(out, "b")
    doc = compare(a, b, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["a_label"] = plan["a"].get("label")
    doc["b_label"] = plan["b"].get("label")
    doc["config_diff"] = config_diff(Config.model_validate(plan["a"]["config"]),
                                     Config.model_validate(plan["b"]["config"]))
    doc["games_dir"] = plan.get("games_dir")
    doc["planned_passes"] = plan.get("passes")
    doc["max_passes"] = plan.get("max_passes")
    return doc


def write_outputs(out: Path, doc: dict[str, Any]) -> None:
    (out / "ab.json").write_text(json.dumps(doc, indent=1) + "\n")  # what `duck ab` prints
    (out / "report.html").write_text(ab_html(doc, title=out.name), encoding="utf-8")


def merge(out: Path, shards: list[Path], *, n_boot: int = 10000, n_perm: int = 20000,
          seed: int = 0) -> dict[str, Any]:
    """Gather the records of shard folders of one experiment into `out` and score them."""
    plans = []
    for s in shards:
        p = s / "plan.json"
        if not p.exists():
            raise SystemExit(f"{s}: no plan.json (not a `duck ab` folder)")
        plans.append(json.loads(p.read_text()))
    base = plans[0]
    for s, p in zip(shards[1:], plans[1:]):
        for arm in ARMS:
            if not same_experiment(p[arm]["config"], base[arm]["config"]):
                raise SystemExit(f"{s}: arm {arm} has another config than {shards[0]}")
    out.mkdir(parents=True, exist_ok=True)
    copied = 0
    for s in shards:
        for f in _record_files(s):
            rel = f.relative_to(s)
            if rel.parts[0] not in ARMS:
                continue
            dst = out / rel
            if record_complete(dst) or not record_complete(f):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
            copied += 1
            if (conv := find_conversation(f)) is not None:  # the game's conversation goes with it
                target = conversation_path(dst).with_name(conv.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(conv, target)
    plan = dict(base) | {"shard": None, "games": sorted({g for p in plans for g in p["games"]}),
                         "passes": max(p["passes"] for p in plans),
                         "max_passes": max(p.get("max_passes", p["passes"]) for p in plans),
                         "merged_from": [str(s) for s in shards]}
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    doc = ab_document(out, plan, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["merged_from"] = plan["merged_from"]
    doc["records_copied"] = copied
    write_outputs(out, doc)
    return doc


def stats_from_paths(a: str, b: str | None, *, a_passes: str | None = None, b_passes: str | None = None,
                     pair_by: str = "key", n_boot: int = 10000, n_perm: int = 20000,
                     seed: int = 0) -> dict[str, Any]:
    if b is None:
        out = Path(a)
        plan_path = out / "plan.json"
        if not plan_path.exists():
            raise SystemExit(f"{a}: one argument must be a `duck ab` folder (plan.json); else give A and B")
        return ab_document(out, json.loads(plan_path.read_text()), n_boot=n_boot, n_perm=n_perm, seed=seed)
    sa, ia = load_scores(a)
    sb, ib = load_scores(b)
    sa, sb = filter_passes(sa, parse_passes(a_passes)), filter_passes(sb, parse_passes(b_passes))
    if pair_by == "order":
        sa, sb = pair_by_order(sa), pair_by_order(sb)
    pairs, unpaired = pair_up(sa, sb)
    if not pairs:  # "no difference, p = 1" from nothing would read as a result
        raise SystemExit(f"no (game, pass) pairs in common between {a} "
                         f"({unpaired['a']} runs) and {b} ({unpaired['b']} runs); pick matching passes "
                         "(--a-passes/--b-passes) or --pair-by order")
    doc = compare(sa, sb, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["a_label"] = a + (f" passes {a_passes}" if a_passes else "")
    doc["b_label"] = b + (f" passes {b_passes}" if b_passes else "")
    doc["sources"] = {"a": ia, "b": ib, "pair_by": pair_by}
    return doc
