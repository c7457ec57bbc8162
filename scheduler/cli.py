"""`duck simulate`: compare scheduling policies on the recorded Duck progress curves.

    duck simulate --runs runs.jsonl --policy adaptive --scenario 30min --seeds 200
    duck simulate --runs runs.jsonl --scenario kaggle --seeds 200 --compare

Prints JSON: `expected_levels` and `expected_score` (mean and 95% CI over seeds; levels
per 110-game set, score in percent), `last_end_seconds` (mean over seeds of the time the
last game ended; `_max` beside it), and with `--compare` both policies on the same draws
plus `paired_difference` (adaptive - fixed). Also the check of the per-level score
recompute against the recorded final scores, and the fit of the curve-extension model.

Registered into the main `duck` CLI by duck/cli.py (`register(subparsers)`); also runs as
`python -m scheduler.cli simulate ...`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from duck.config import SCHEDULERS, SchedulerConfig, load_config

from . import curves, extend
from .policy import make_policy
from .simulate import SCENARIOS, evaluate, paired, summarize


def _section(pairs: list[str] | None) -> tuple[SchedulerConfig, dict]:
    """The scheduler section with `--set` applied to its adaptive thresholds (validated like
    any config override: an unknown name is an error), and the fields that were set."""
    overrides = [f"scheduler.adaptive.{kv.strip()}" for kv in pairs or []]
    section = load_config(overrides=overrides, env={}).scheduler
    names = [kv.partition("=")[0].strip() for kv in pairs or []]
    return section, {n: getattr(section.adaptive, n) for n in names}


def simulate_command(args: argparse.Namespace) -> int:
    base = Path(args.baselines) if args.baselines else curves.default_baselines_path()
    runs = curves.load_runs(Path(args.runs), curves.load_baselines(base))
    agree, total, worst = curves.check_scores(runs)
    model = extend.fit(runs)
    sc = SCENARIOS[args.scenario]
    sc = replace(sc, budget_s=args.budget or sc.budget_s, slots=args.slots or sc.slots,
                 n_games=args.games or sc.n_games,
                 margin_s=sc.margin_s if args.margin is None else args.margin)
    section, overrides = _section(args.set)
    names = ["fixed", "adaptive"] if args.compare else [args.policy]
    policies = {n: make_policy(n, section, margin_s=sc.margin_s if n == "adaptive" else 0.0) for n in names}
    seeds = range(args.seed0, args.seed0 + args.seeds)
    res = evaluate(runs, policies, sc, seeds, model)
    doc: dict = {
        "scenario": {"name": sc.name, "budget_s": sc.budget_s, "slots": sc.slots,
                     "n_games": sc.n_games, "extend_past_recorded_end": sc.extend},
        "seeds": [seeds.start, seeds.stop - 1],
        "runs": total,
        "score_recompute": {"agree": agree, "runs": total, "max_abs_diff": worst},
    }
    if overrides:
        doc["adaptive_overrides"] = overrides
    if args.compare:
        for n in names:
            doc[n] = summarize(res[n], sc)
        doc["paired_difference"] = {"adaptive_minus_fixed": paired(res["adaptive"], res["fixed"])}
    else:
        doc["policy"] = args.policy
        doc.update(summarize(res[args.policy], sc))
    if sc.extend or args.show_fit:
        doc["extension_model"] = extend.fit_report(model)
    print(json.dumps(doc, indent=1))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate",
        help="replay recorded progress curves under a scheduling policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", required=True, help="runs.jsonl of recorded game-runs")
    p.add_argument("--baselines", default=None,
                   help="public-games.json or a games folder (default: environment_files/, "
                        "else ../shared/public-games.json)")
    p.add_argument("--policy", choices=SCHEDULERS, default="adaptive", help="the scheduling policy")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="30min",
                   help="the budget, margin and games of the simulated run")
    p.add_argument("--seeds", type=int, default=100, help="number of drawn sets")
    p.add_argument("--seed0", type=int, default=0, help="first seed")
    p.add_argument("--compare", action="store_true",
                   help="run fixed and adaptive on the same draws; report the paired difference")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a field of scheduler.adaptive (repeatable), e.g. stall_s=600")
    p.add_argument("--games", type=int, default=None, help="games per set (default 110)")
    p.add_argument("--slots", type=int, default=None, help="concurrent games (default 28)")
    p.add_argument("--budget", type=float, default=None, help="budget seconds (overrides scenario)")
    p.add_argument("--margin", type=float, default=None,
                   help="adaptive ends games this long before the deadline (default: the scenario's, 300)")
    p.add_argument("--show-fit", action="store_true", help="print the extension model's fit")
    p.set_defaults(func=simulate_command)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
