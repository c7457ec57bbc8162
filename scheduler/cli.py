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
from pathlib import Path

from . import curves, extend
from .policy import POLICIES, make_policy
from .simulate import SCENARIOS, Scenario, evaluate, paired, summarize


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for kv in pairs or []:
        key, sep, val = kv.partition("=")
        if not sep:
            raise SystemExit(f"--set wants key=value, got {kv!r}")
        out[key.strip()] = _value(val)
    return out


def simulate_command(args: argparse.Namespace) -> int:
    base = Path(args.baselines) if args.baselines else curves.default_baselines_path()
    runs = curves.load_runs(Path(args.runs), curves.load_baselines(base))
    agree, total, worst = curves.check_scores(runs)
    model = extend.fit(runs)
    sc = SCENARIOS[args.scenario]
    if args.games or args.slots or args.budget:
        sc = Scenario(
            sc.name,
            budget_s=args.budget or sc.budget_s,
            slots=args.slots or sc.slots,
            n_games=args.games or sc.n_games,
            extend=sc.extend,
        )
    overrides = _overrides(args.set)
    names = ["fixed", "adaptive"] if args.compare else [args.policy]
    policies = {n: make_policy(n, **(overrides if n == "adaptive" else {})) for n in names}
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
    p.add_argument("--policy", choices=sorted(POLICIES), default="adaptive")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="30min")
    p.add_argument("--seeds", type=int, default=100, help="number of drawn sets")
    p.add_argument("--seed0", type=int, default=0, help="first seed")
    p.add_argument("--compare", action="store_true",
                   help="run fixed and adaptive on the same draws; report the paired difference")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override an adaptive config field (repeatable), e.g. stall_s=600")
    p.add_argument("--games", type=int, default=None, help="games per set (default 110)")
    p.add_argument("--slots", type=int, default=None, help="concurrent games (default 28)")
    p.add_argument("--budget", type=float, default=None, help="budget seconds (overrides scenario)")
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
