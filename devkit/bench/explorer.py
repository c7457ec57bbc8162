"""Benchmark of the explorer over a games folder and several seeds, optionally side by side
with an older version of it.

    duck bench explorer --games environment_files --seeds 0 1 2 3 4 \\
        --max-actions 1000 --workers 2
    duck bench explorer --games ../shared/community-games/environment_files \\
        --seeds 0 1 --max-actions 1000 --workers 2 --baseline d76980c --game-seconds 300

Every (seed, game) is played in its own subprocess (devkit.bench.explorer_arms), `--game-seconds`
capping one (its record kept and scored as it stands, the game listed under `timeouts`).
`--baseline REF` plays git ref REF's explorer (a temporary worktree) interleaved game by game
and adds "baseline", "ratio" and "paired" (the per-seed differences, with their standard error);
`--ref REF` plays the current arm from a ref too (else edits made during a long run leak in).
Per arm: per game and seed the levels, actions per completed level and score; overall each
seed's score, their mean, minimum, spread and `score_sem`; every field: docs/explorer.md. On
folders without human baselines (the community games) read levels, not score.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from duck.config import ConfigError, ExplorerConfig, parse_value, validate
from devkit.bench.explorer_arms import ROOT, JobResult, checkout, game_dirs, interleave, run_jobs
from duck.play.record import Record, read_records
from duck.play.scoring import write_score


def record_whole_game_resets(rec: Record) -> int:
    """RESETs sent while the level had no actions (they restart the whole game offline)."""
    n, level_actions, levels = 0, 0, int(rec.header.get("levels", 0))
    for a in rec.actions:
        if a["action"][0] == 0:
            n += level_actions == 0
            level_actions = 0
        elif a["levels"] != levels:
            level_actions = 0
        else:
            level_actions += 1
        levels = a["levels"]
    return n


def _collect(results: list[JobResult], arm: str, seeds: list[int], out: Path) -> dict[int, dict]:
    """Move each job's record into out/<arm>/seed<N>/records and score each seed folder."""
    per_seed: dict[int, dict] = {}
    for seed in seeds:
        run_dir = out / arm / f"seed{seed}"
        (run_dir / "records").mkdir(parents=True, exist_ok=True)
        for r in results:
            if r.job.arm == arm and r.job.seed == seed and r.job.record.exists():
                shutil.move(str(r.job.record), run_dir / "records" / r.job.record.name)
        shutil.rmtree(run_dir / "jobs", ignore_errors=True)
        doc = write_score(run_dir) if any((run_dir / "records").glob("*.jsonl")) else {"games": {}}
        doc["whole_game_resets"] = sum(record_whole_game_resets(rec) for rec in read_records(run_dir))
        per_seed[seed] = doc
    return per_seed


def _apl(level_actions: list[int]) -> float | None:
    return round(sum(level_actions) / len(level_actions), 1) if level_actions else None


def summarize(per_seed: dict[int, dict], seeds: list[int], results: list[JobResult],
              max_actions: int, seconds: float) -> dict:
    """The JSON document of one arm (see the module docstring)."""
    game_ids = sorted({g for doc in per_seed.values() for g in doc["games"]}
                      | {r.job.game for r in results})
    games_out: dict[str, Any] = {}
    for g in game_ids:
        rows = {s: per_seed[s]["games"].get(g) for s in seeds}
        la = [n for r in rows.values() if r for n in r["level_actions"]]
        games_out[g] = {
            "mean_score": round(statistics.mean(r["score"] if r else 0.0 for r in rows.values()), 4),
            "mean_levels": round(statistics.mean(r["levels"] if r else 0 for r in rows.values()), 2),
            "actions_per_level": _apl(la),
            "seeds": {str(s): ({"levels": r["levels"], "level_actions": r["level_actions"],
                                "score": round(r["score"], 4)} if r else None)
                      for s, r in rows.items()},
        }
    scores = [statistics.mean(v["score"] for v in per_seed[s]["games"].values())
              if per_seed[s]["games"] else 0.0 for s in seeds]
    level1 = [sum(1 for v in per_seed[s]["games"].values() if v["levels"] >= 1) for s in seeds]
    levels = [sum(v["levels"] for v in per_seed[s]["games"].values()) for s in seeds]
    all_la = [n for s in seeds for v in per_seed[s]["games"].values() for n in v["level_actions"]]
    errors = sorted({f"{r.job.game} seed {r.job.seed}: {r.stderr.strip().splitlines()[-1][:200]}"
                     for r in results if not r.timeout and r.returncode not in (0, None)
                     and r.stderr.strip()}
                    | {f"{g} seed {s}: {v['error'][:200]}" for s in seeds
                       for g, v in per_seed[s]["games"].items() if v.get("error")})
    overall = {
        "seed_scores": {str(s): round(v, 4) for s, v in zip(seeds, scores)},
        "mean_score": round(statistics.mean(scores), 4),
        "min_score": round(min(scores), 4),
        "spread": round(max(scores) - min(scores), 4),
        "score_sem": _sem(scores),
        "level1_games": dict(zip(map(str, seeds), level1)),
        "mean_level1_games": round(statistics.mean(level1), 2),
        "levels": dict(zip(map(str, seeds), levels)),
        "mean_levels": round(statistics.mean(levels), 2),
        "actions_per_level": _apl(all_la),
        "games": len(game_ids),
        "whole_game_resets": sum(per_seed[s]["whole_game_resets"] for s in seeds),
        "errors": errors,
        "timeouts": sorted(f"{r.job.game} seed {r.job.seed}" for r in results if r.timeout),
        "slowest": sorted(((round(r.seconds, 1), f"{r.job.game} seed {r.job.seed}")
                           for r in results), reverse=True)[:5],
        "max_actions": max_actions,
        "seconds": round(seconds, 1),
    }
    return {"games": games_out, "overall": overall}


def _sem(xs: list[float]) -> float | None:
    """Standard error of the mean of per-seed values (None for one seed): how far the mean
    of these seeds may sit from the mean over many seeds."""
    return round(statistics.stdev(xs) / math.sqrt(len(xs)), 4) if len(xs) > 1 else None


def paired(current: dict, baseline: dict) -> dict:
    """Per-seed differences current - baseline of score and levels, their mean and its
    standard error: one seed plays the same games in both arms, so the difference varies
    less than either arm's score does from seed to seed."""
    c, b = current["overall"], baseline["overall"]
    seeds = [s for s in c["seed_scores"] if s in b["seed_scores"]]
    out: dict[str, Any] = {"seeds": len(seeds)}
    for name, field in (("score", "seed_scores"), ("levels", "levels")):
        d = [c[field][s] - b[field][s] for s in seeds]
        out[f"{name}_diff"] = round(statistics.mean(d), 4) if d else None
        out[f"{name}_diff_sem"] = _sem(d)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def run(games: str, seeds: list[int], max_actions: int, workers: int, out: Path,
        only: list[str] | None = None, options: dict[str, Any] | None = None,
        baseline: str | None = None, game_seconds: float | None = None,
        ref: str | None = None) -> dict:
    out = out.resolve()  # the jobs run with the arm's code folder as working directory
    dirs = game_dirs(Path(games))
    if only:
        dirs = {g: d for g, d in dirs.items() if g in only or g.split("-")[0] in only}
    if not dirs:
        raise SystemExit(f"no games found under {games}")
    t0 = time.monotonic()
    arms, commits = {"current": ROOT}, {}
    with ExitStack() as trees:
        for arm, r in (("current", ref), ("baseline", baseline)):
            if r:
                arms[arm], commits[arm] = trees.enter_context(checkout(r))
        jobs = list(interleave(arms, seeds, dirs, out, {"current": options or {}}))
        results = run_jobs(jobs, max_actions, workers, game_seconds)
    seconds = time.monotonic() - t0
    docs = {arm: summarize(_collect(results, arm, seeds, out), seeds,
                           [r for r in results if r.job.arm == arm], max_actions, seconds)
            for arm in arms}
    doc = docs["current"]
    if ref:
        doc["ref"], doc["commit"] = ref, commits["current"]
    if baseline:
        base = doc["baseline"] = docs["baseline"]
        base["ref"], base["commit"] = baseline, commits["baseline"]
        c, b = doc["overall"], base["overall"]
        doc["ratio"] = {k: _ratio(c[k], b[k]) for k in
                        ("mean_levels", "mean_level1_games", "mean_score", "actions_per_level")}
        doc["paired"] = paired(doc, base)
    if game_seconds:
        doc["overall"]["game_seconds"] = game_seconds
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="duck bench explorer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="environment_files")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--max-actions", type=int, default=1000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--only", nargs="*", default=None, help="game ids or 4-letter prefixes")
    p.add_argument("--out", default=None, help="run folders (default: a temporary folder)")
    p.add_argument("--option", action="append", default=[],
                   help="explorer option NAME=VALUE (JSON value) for the current arm: a field of the "
                        "config's explorer section (duck.config.ExplorerConfig)")
    p.add_argument("--baseline", default=None, metavar="REF",
                   help="also play the explorer of this git ref, side by side")
    p.add_argument("--ref", default=None,
                   help="play the current arm from this git ref (default: the working tree),"
                        " so that edits made while it runs do not leak into it")
    p.add_argument("--game-seconds", type=float, default=None,
                   help="wall-clock cap per game and seed (the record is scored as it stands)")
    args = p.parse_args(argv)
    options = {k: parse_value(v) for k, _, v in (o.partition("=") for o in args.option)}
    try:  # a misspelt option is one line now, not an error in every game's job
        bad = next((o for o in args.option if "=" not in o), None)
        if bad is not None:
            raise ConfigError(f"{bad!r} is not NAME=VALUE")
        validate(ExplorerConfig, options)
    except ConfigError as e:
        print(f"duck bench explorer: error: --option {e}", file=sys.stderr)
        return 2
    kw = dict(only=args.only, options=options, baseline=args.baseline,
              game_seconds=args.game_seconds, ref=args.ref)
    if args.out:
        doc = run(args.games, args.seeds, args.max_actions, args.workers, Path(args.out), **kw)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-explorer-") as tmp:
            doc = run(args.games, args.seeds, args.max_actions, args.workers, Path(tmp), **kw)
    print(json.dumps(doc, indent=1))
    return 0
