"""Paired A/B experiments: `duck ab`, `duck ab-stats`, `duck ab-merge`.

`duck ab --a A.toml --b B.toml --games DIR --passes N --out OUT` plays every game of DIR N times
with each config. The rule: the two runs of one (game, pass) share seed p and are queued next to
each other (who goes first alternates), so they run at the same time, on the same endpoint,
under the same load. The results are paired per game and pass and compared with duck.lab.stats
(games are the unit). `--max-passes M` adds passes to games still within noise; a finished
(game, pass, arm) is never replayed (the same command resumes); `--shard i/n` and `duck
ab-merge` split an experiment over machines; `duck ab-stats` computes the same JSON from existing
results. The folder, resuming, shards and ab-stats's inputs: docs/ab.md.

The pieces: duck.lab.ab.config (the arms' configs and policy options), duck.lab.ab.play (playing
the paired units), duck.lab.ab.scores (scores from folders and files) and duck.lab.ab.results
(ab.json, report.html, merging shards, ab-stats); this module runs an experiment (`run_ab`),
holds the commands and re-exports the pieces' public names.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from duck.config import Config
from duck.lab.ab.config import ARMS, config_diff, load_arm, same_experiment
from duck.lab.ab.play import parse_shard, run_units, select_games
from duck.lab.ab.results import ab_document, merge, stats_from_paths, write_outputs
from duck.lab.ab.scores import arm_scores
from duck.lab.report.ab import verdict
from duck.lab.stats import compare
from duck.run import provenance
from duck.run.info import ROOT, duck_command
from duck.run.interrupt import EXIT_INTERRUPTED
from duck.run.pool import Runner
from duck.run.progress import RunView

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------------------

def _overrides(args: argparse.Namespace, arm: str) -> list[str]:
    """An arm's `--set-a`/`--set-b` values, then `--max-actions` (both arms)."""
    sets = list(getattr(args, f"set_{arm}") or [])
    if getattr(args, "max_actions", None) is not None:
        sets.append(f"play.max_actions={args.max_actions}")
    return sets


def _plan(args: argparse.Namespace, configs: dict[str, Config], games: list[str]) -> dict[str, Any]:
    def arm(name: str) -> dict[str, Any]:
        files, sets, cfg = getattr(args, name), _overrides(args, name), configs[name]
        label = " + ".join(Path(f).stem for f in files) + (f" [{', '.join(sets)}]" if sets else "")
        return {"files": files, "overrides": sets, "label": label, "config": cfg.model_dump(mode="json"),
                "policy_files": _policy_files(cfg)}
    return {"a": arm("a"), "b": arm("b"), "games_dir": str(args.games), "games": games, "passes": args.passes,
            "max_passes": max(args.passes, args.max_passes or args.passes), "shard": args.shard}


def _policy_files(cfg: Config) -> list[dict[str, Any]]:
    path = provenance.policy_file(cfg)
    return [] if path is None else [{"path": str(path.resolve()), "sha256": provenance.sha256(path)}]


def _check_plan(out: Path, plan: dict[str, Any]) -> None:
    path = out / "plan.json"
    if path.exists():
        old = json.loads(path.read_text())
        for arm in ARMS:
            if not same_experiment(old[arm]["config"], plan[arm]["config"]):
                diff = config_diff(Config.model_validate(old[arm]["config"]),
                                   Config.model_validate(plan[arm]["config"]))
                raise SystemExit(f"{out} holds another experiment (arm {arm} differs: {diff}); "
                                 f"use a new --out")
            if old[arm].get("policy_files", plan[arm]["policy_files"]) != plan[arm]["policy_files"]:
                raise SystemExit(f"{out}: the policy file of arm {arm} changed since the experiment started "
                                 f"(its finished runs were played by the old one); put it back, or use a new --out")
    path.write_text(json.dumps(plan, indent=1))
    for arm in ARMS:  # a copy of each arm's own policy file (duck.run.provenance)
        provenance.record(Config.model_validate(plan[arm]["config"]), out / arm, ROOT)


def run_ab(args: argparse.Namespace, *, interactive: bool = False) -> dict[str, Any]:
    """Play the experiment and score it; `interactive`: the progress display and Ctrl-C
    (duck.run.pool). Returns ab.json's document, or {"interrupted": why, ...} when stopped."""
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = {arm: load_arm(getattr(args, arm), _overrides(args, arm)) for arm in ARMS}
    games_dir = Path(args.games)
    games = select_games(games_dir, args.only)
    plan = _plan(args, configs, games)
    _check_plan(out, plan)
    workers = args.workers or configs["a"].play.workers
    units = [(g, p) for p in range(args.passes) for g in games]
    shard = parse_shard(args.shard)
    if shard:
        i, n = shard
        units = [u for k, u in enumerate(units) if k % n == i - 1]
    view = None
    if interactive:
        title = (f"{len(games)} games × {args.passes} passes × 2 arms · {workers} worker(s) · "
                 f"{configs['a'].play.max_actions}/{configs['b'].play.max_actions} actions (A/B) → {out}")
        view = RunView([], title=title, prog="duck ab", group=lambda name: name.split()[0], unit="run")
    common = dict(out=out, games_dir=games_dir, configs=configs, games=games, game_seconds=args.game_seconds)
    ends: list[dict] = []
    with Runner(view, workers=workers, interactive=interactive, kill_line=lambda: _killed(args)) as runner:
        ends += run_units(units, runner=runner, shards=shard[1] if shard else 1, **common)
        rounds = 0
        if not shard and plan["max_passes"] > args.passes:
            while not runner.stop.is_set() and (args.budget_s is None or time.monotonic() - t0 < args.budget_s):
                extra = _noisy(out, games, plan["max_passes"])
                if not extra:
                    break
                rounds += 1
                log.info("adaptive round %d: one more pass of %s", rounds, ", ".join(g for g, _ in extra))
                ends += run_units(extra, runner=runner, **common)
        reason = runner.reason
    if reason:
        return {"interrupted": reason, "finished": sum(e.get("kind") == "end" and e.get("end_reason") != "stopped"
                                                        for e in ends),
                "stopped": sum(e.get("end_reason") == "stopped" for e in ends),
                "not_started": sum(e.get("kind") == "skipped" for e in ends)}
    doc = ab_document(out, plan, n_boot=args.boot, n_perm=args.perm, seed=args.stats_seed)
    doc["adaptive_rounds"] = rounds
    doc["shard"] = args.shard
    doc["seconds"] = round(time.monotonic() - t0, 1)
    write_outputs(out, doc)
    return doc


def _noisy(out: Path, games: list[str], max_passes: int) -> list[tuple[str, int]]:
    """The next adaptive round: one more pass of each game still within noise."""
    doc = compare(arm_scores(out, "a"), arm_scores(out, "b"), n_boot=200, n_perm=200)
    extra = []
    for g in games:
        s = doc["games"].get(g)
        if s and s["within_noise"] and s["passes"] < max_passes:
            extra.append((g, max(s["keys"]) + 1))
    return extra


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------

def resume_command(args: argparse.Namespace) -> str:
    """The command that resumes this experiment: the same one (finished runs are kept)."""
    argv = getattr(args, "argv", None)
    return f"{duck_command()} {shlex.join(argv) if argv else 'ab ... (the same command)'}"


def _killed(args: argparse.Namespace) -> str:
    return (f"duck ab: killed at once (second Ctrl-C); records keep every line written; "
            f"resume with: {resume_command(args)}")


def summary_lines(doc: dict[str, Any], out: Path) -> list[str]:
    """The verdict in a few lines, the last thing `duck ab` says."""
    lo, hi = doc["ci95"]
    text, _ = verdict(doc)
    lines = [f"duck ab: mean score over the {doc['n_games']} games (each the mean of its passes): "
             f"A {doc['a_mean']:.3f}%, B {doc['b_mean']:.3f}%; B − A = {doc['delta']:+.3f} points, 95% "
             f"interval [{lo:+.3f}, {hi:+.3f}] (bootstrap over games); games B better / worse / tied "
             f"{doc['wins']} / {doc['losses']} / {doc['ties']}"]
    if doc.get("p_value_pairs") is not None:
        lines.append(f"duck ab: secondary: p = {doc['p_value_pairs']:.3g} over pairs (sharp null: B changes "
                     f"nothing in any run of these games)")
    lines.append(f"duck ab: wrote {out / 'ab.json'} and {out / 'report.html'}")
    return lines + [f"duck ab: {text}"]


def _cmd_ab(args: argparse.Namespace) -> int:
    doc = run_ab(args, interactive=True)
    if "interrupted" in doc:
        print(f"duck ab: interrupted ({doc['interrupted']}): {doc['finished']} runs finished now, {doc['stopped']} "
              f"stopped mid-game, {doc['not_started']} not started; finished records are kept; "
              f"resume with: {resume_command(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED if doc["interrupted"] != "SIGTERM" else 128 + 15
    terminal = sys.stdout.isatty() and not args.json
    if not terminal:
        print(json.dumps(doc, indent=1), flush=True)  # exactly ab.json
    for line in summary_lines(doc, Path(args.out)):
        print(line, file=sys.stdout if terminal else sys.stderr)
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    doc = stats_from_paths(args.A, args.B, a_passes=args.a_passes, b_passes=args.b_passes,
                           pair_by=args.pair_by, n_boot=args.boot, n_perm=args.perm, seed=args.stats_seed)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_outputs(out, doc)
    print(json.dumps(doc, indent=1))
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    doc = merge(Path(args.out), [Path(s) for s in args.shards], n_boot=args.boot, n_perm=args.perm,
                seed=args.stats_seed)
    print(json.dumps(doc, indent=1))  # exactly ab.json
    return 0


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boot", type=int, default=10000, help="bootstrap resamples")
    p.add_argument("--perm", type=int, default=20000, help="sign flips when not enumerated exactly")
    p.add_argument("--stats-seed", type=int, default=0, help="seed of the bootstrap and the sign flips")


def register(sub: Any) -> None:
    p = sub.add_parser("ab", help="paired A/B experiment of two configs on the same games and seeds")
    p.add_argument("--a", nargs="+", required=True, metavar="TOML",
                   help="config files of arm A (the baseline), applied in order")
    p.add_argument("--b", nargs="+", required=True, metavar="TOML",
                   help="config files of arm B (the variant), e.g. the baseline then one change")
    p.add_argument("--set-a", action="extend", nargs="+", default=None, metavar="KEY=VALUE",
                   help="overrides for A after its files, e.g. play.seed=1 explorer.nav=false")
    p.add_argument("--set-b", action="extend", nargs="+", default=None, metavar="KEY=VALUE",
                   help="overrides for B (several values, or the flag repeated)")
    p.add_argument("--max-actions", type=int, default=None, help="per game run, both arms (play.max_actions)")
    p.add_argument("--json", action="store_true", help="print ab.json on stdout on a terminal too")
    p.add_argument("--games", default="environment_files",
                   help="environments folder (default: the public games; the bundled ones: tests/games)")
    p.add_argument("--passes", type=int, default=3, help="passes per game (pass p uses seed p)")
    p.add_argument("--max-passes", type=int, default=None,
                   help="adaptive: more passes for games within noise, up to this many")
    p.add_argument("--budget-s", type=float, default=None, help="no new adaptive round after this long")
    p.add_argument("--game-seconds", type=float, default=None, help="wall-clock limit per game run")
    p.add_argument("--out", required=True, help="experiment folder")
    p.add_argument("--only", nargs="*", default=None, help="game ids or 4-letter prefixes")
    p.add_argument("--shard", default=None, help="i/n: play only this machine's share (1-based)")
    p.add_argument("--workers", type=int, default=None, help="parallel game processes (default play.workers)")
    _stats_args(p)
    p.set_defaults(func=_cmd_ab)

    s = sub.add_parser("ab-stats", help="A/B statistics from run folders or runs.jsonl-format files")
    s.add_argument("A", help="arm A: run folder, record, runs.jsonl file; or alone: a `duck ab` folder")
    s.add_argument("B", nargs="?", default=None, help="arm B")
    s.add_argument("--a-passes", default=None, help="keep only these passes of A, e.g. 0-4")
    s.add_argument("--b-passes", default=None, help="keep only these passes of B, e.g. 5-9")
    s.add_argument("--pair-by", choices=["key", "order"], default="key",
                   help="pair runs by pass (or seed) [key], or by rank within each game [order]")
    s.add_argument("--out", default=None, help="also write ab.json and report.html here")
    _stats_args(s)
    s.set_defaults(func=_cmd_stats)

    m = sub.add_parser("ab-merge", help="gather `duck ab --shard` folders into one and score it")
    m.add_argument("shards", nargs="+", help="shard folders of one experiment")
    m.add_argument("--out", required=True, help="the merged experiment folder")
    _stats_args(m)
    m.set_defaults(func=_cmd_merge)


