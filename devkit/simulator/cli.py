"""`duck simulate`: compare scheduling policies on progress curves through a server model.

    duck simulate --runs ../shared/duck-traces/runs.jsonl --policy field --scenario kaggle --seeds 20
    duck simulate --runs ../shared/duck-traces/runs.jsonl --scenario kaggle --seeds 20 --compare [--markdown]

Prints JSON. One policy: `expected_score` (percent, mean and 95% CI over seeds),
`expected_levels` (per set of 110 games), `idle_slot_share`, `unplayed_games`, tokens, yields
and preemptions per game, on one curve set (`--curves duck|synthetic`, default duck). With
`--compare`: `field`, `ucb`, `adaptive` and the Duck's `fixed` split on the same draws, for
each S in `--slots` (default 8,10,12,16) and each curve set, with every policy's paired
difference from `field`, and which policy beats `field` everywhere; `--markdown` prints that
as a table instead. Also the check of the per-level score recompute against the recorded final
scores, and (`--show-fit`, or the kaggle scenario) the fit of the token hazard model that
extends the Duck's curves.

Registered into the main `duck` CLI by duck/cli.py (`register(subparsers)`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from duck.config import SCHEDULERS, SchedulerConfig, load_config

from . import compare, curves, extend, synthetic, traces, trajectories
from scheduler.policy import make_policy
from .simulate import SCENARIOS, simulate, summarize

COMPARED = ("field", "ucb", "adaptive", "fixed")


def _section(pairs: list[str] | None) -> tuple[SchedulerConfig, dict]:
    """The scheduler section with `--set` applied (validated like any config override: an
    unknown name is an error). `KEY=VALUE` sets scheduler.KEY when KEY is a field of the
    section or dotted (`ucb.exploration=0.05`), else scheduler.adaptive.KEY (as it always did)."""
    overrides, names = [], []
    for kv in pairs or []:
        key = kv.partition("=")[0].strip()
        full = key if "." in key or key in SchedulerConfig.model_fields else f"adaptive.{key}"
        overrides.append(f"scheduler.{full}={kv.partition('=')[2].strip()}")
        names.append(full)
    section = load_config(overrides=overrides, env={}).scheduler

    def get(name: str):
        obj = section
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj
    return section, {n: get(n) for n in names}


def _slots(text: str | None, compare_mode: bool) -> list[int]:
    if not text:
        return [8, 10, 12, 16] if compare_mode else [SchedulerConfig().slots]
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--slots: a number or a comma list of numbers, got {text!r}") from None
    if not out or min(out) < 1:
        raise SystemExit(f"--slots: every slot count must be >= 1, got {text!r}")
    return out


def simulate_command(args: argparse.Namespace) -> int:
    base = Path(args.baselines) if args.baselines else curves.default_baselines_path()
    baselines = curves.load_baselines(base)
    runs = traces.load_token_runs(Path(args.runs), baselines)
    recorded = {(r.game_id, r.pass_): r.final_score for r in curves.load_runs(Path(args.runs), baselines)}
    diffs = [abs(r.score() - recorded[(r.game_id, r.pass_)]) for r in runs]
    sc = SCENARIOS[args.scenario]
    sc = replace(sc, budget_s=args.budget or sc.budget_s, n_games=args.games or sc.n_games,
                 margin_s=sc.margin_s if args.margin is None else args.margin)
    model = extend.fit_tokens(runs) if sc.extend else None
    turns = traces.pooled_turns(runs)
    section, overrides = _section(args.set)
    slots = _slots(args.slots, args.compare)
    seeds = range(args.seed0, args.seed0 + (args.seeds or (20 if args.compare else 100)))
    sets = {"duck": lambda seed, n: trajectories.draw_duck(runs, seed, n, model),
            "synthetic": lambda seed, n: synthetic.draw_synthetic(baselines, turns, seed, n)}
    chosen = args.curves or ("both" if args.compare else "duck")
    if chosen != "both":
        sets = {chosen: sets[chosen]}

    def policies(s: int, names=COMPARED if args.compare else (args.policy,)):
        cfg = section.model_copy(update={"slots": s})
        return {n: make_policy(n, cfg, margin_s=0.0 if n == "fixed" else sc.margin_s) for n in names}

    doc: dict = {
        "scenario": {"name": sc.name, "budget_s": sc.budget_s, "n_games": sc.n_games, "slots": slots,
                     "margin_s": sc.margin_s, "extend_past_recorded_end": sc.extend},
        "seeds": [seeds.start, seeds.stop - 1],
        "runs": len(runs),
        "score_recompute": {"agree": sum(d <= 1e-6 for d in diffs), "runs": len(diffs),
                            "max_abs_diff": max(diffs, default=0.0)},
    }
    if overrides:
        doc["scheduler_overrides"] = overrides
    if args.compare:
        doc.update(compare.report(compare.grid(sets, policies, sc, slots, seeds)))
        if args.markdown:
            print(compare.markdown(doc, COMPARED))
            return 0
    else:
        for cs, draw in sets.items():
            for s in slots:
                ctx, cap = compare.context_for_slots(s)
                sc_s = replace(sc, slots=s, context_tokens=ctx, output_tokens=cap)
                pol = policies(s)[args.policy]
                outs = [simulate(draw(seed, sc.n_games), pol, sc_s) for seed in seeds]
                key = cs if len(slots) == 1 else f"{cs} S={s}"
                doc[key] = {"policy": args.policy, "context_tokens": ctx, **summarize(outs, sc_s)}
    if model is not None or args.show_fit:
        doc["extension_model"] = extend.fit_report(model or extend.fit_tokens(runs))
    print(json.dumps(doc, indent=1))
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate",
        help="replay progress curves under a scheduling policy and a server model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", required=True, help="runs.jsonl of recorded game-runs (turns/ beside it)")
    p.add_argument("--baselines", default=None,
                   help="public-games.json or a games folder (default: environment_files/, "
                        "else ../shared/public-games.json)")
    p.add_argument("--policy", choices=SCHEDULERS, default=SchedulerConfig().policy,
                   help="the scheduling policy")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="30min",
                   help="the budget, margin and games of the simulated run")
    p.add_argument("--curves", choices=("duck", "synthetic", "both"), default=None,
                   help="curve set (default: duck; with --compare: both)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of drawn sets (default 100; 20 with --compare)")
    p.add_argument("--seed0", type=int, default=0, help="first seed")
    p.add_argument("--compare", action="store_true",
                   help="field, ucb, adaptive and fixed on the same draws, over --slots and both curve sets")
    p.add_argument("--markdown", action="store_true", help="with --compare: print the table as markdown")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a field of the scheduler section (repeatable): ucb.exploration=0.05, "
                        "first_turns=false; a bare adaptive field as before, e.g. stall_factor=3")
    p.add_argument("--games", type=int, default=None, help="games per set (default 110)")
    p.add_argument("--slots", default=None,
                   help="server slots, or a comma list (default: the profile's; with --compare 8,10,12,16)")
    p.add_argument("--budget", type=float, default=None, help="budget seconds (overrides scenario)")
    p.add_argument("--margin", type=float, default=None,
                   help="the gate policies end games this long before the budget's end (default: the scenario's, 0)")
    p.add_argument("--show-fit", action="store_true", help="print the token hazard model's fit")
    p.set_defaults(func=simulate_command)
    return p

