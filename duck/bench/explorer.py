"""Benchmark of the explorer over a games folder and several seeds.

    python -m duck.bench explorer --games environment_files --seeds 0 1 2 3 4 \\
        --max-actions 1000 --workers 2

Plays every game once per seed with `duck.run.play_folder` (records and score.json per seed
under --out/seed<N>, scored by duck.play.scoring), then prints one JSON document: per game and
seed the levels, the actions per completed level and the official score; per game the mean
score and levels over seeds; overall the score of each seed, their mean, minimum and spread
(max - min), the mean number of games with level 1 completed, and the number of whole-game
RESETs sent (a RESET at level_actions 0: must be 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from duck.play.record import read_records
from duck.run import play_folder


def record_whole_game_resets(rec: Any) -> int:
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


def whole_game_resets(run_dir: Path) -> int:
    return sum(record_whole_game_resets(rec) for rec in read_records(run_dir))


def run(games: str, seeds: list[int], max_actions: int, workers: int, out: Path,
        only: list[str] | None = None, options: dict[str, Any] | None = None) -> dict:
    per_seed: dict[int, dict] = {}
    resets = 0
    t0 = time.monotonic()
    for seed in seeds:
        run_dir = out / f"seed{seed}"
        kwargs: dict[str, Any] = dict(policy="explorer", seed=seed, max_actions=max_actions,
                                      workers=workers, games=only, options=options or {})
        try:
            doc = play_folder(games, run_dir, overwrite=True, **kwargs)
        except TypeError:  # an older play_folder without `overwrite`
            doc = play_folder(games, run_dir, **kwargs)
        per_seed[seed] = doc
        resets += whole_game_resets(run_dir)
    game_ids = sorted({g for doc in per_seed.values() for g in doc["games"]})
    games_out: dict[str, Any] = {}
    for g in game_ids:
        rows = {s: per_seed[s]["games"].get(g) for s in seeds}
        games_out[g] = {
            "mean_score": round(statistics.mean(r["score"] if r else 0.0 for r in rows.values()), 4),
            "mean_levels": round(statistics.mean(r["levels"] if r else 0 for r in rows.values()), 2),
            "seeds": {str(s): ({"levels": r["levels"], "level_actions": r["level_actions"],
                                "score": round(r["score"], 4)} if r else None)
                      for s, r in rows.items()},
        }
    scores = [per_seed[s]["score"] for s in seeds]
    level1 = [sum(1 for v in per_seed[s]["games"].values() if v["levels"] >= 1) for s in seeds]
    levels = [sum(v["levels"] for v in per_seed[s]["games"].values()) for s in seeds]
    overall = {
        "seed_scores": {str(s): round(v, 4) for s, v in zip(seeds, scores)},
        "mean_score": round(statistics.mean(scores), 4),
        "min_score": round(min(scores), 4),
        "spread": round(max(scores) - min(scores), 4),
        "level1_games": dict(zip(map(str, seeds), level1)),
        "mean_level1_games": round(statistics.mean(level1), 2),
        "mean_levels": round(statistics.mean(levels), 2),
        "whole_game_resets": resets,
        "max_actions": max_actions,
        "seconds": round(time.monotonic() - t0, 1),
    }
    return {"games": games_out, "overall": overall}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m duck.bench explorer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="environment_files")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--max-actions", type=int, default=1000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--only", nargs="*", default=None, help="game ids or 4-letter prefixes")
    p.add_argument("--out", default=None, help="run folders (default: a temporary folder)")
    p.add_argument("--option", action="append", default=[],
                   help="explorer option NAME=VALUE (JSON value), e.g. level_cap=400")
    args = p.parse_args(argv)
    options = {}
    for o in args.option:
        k, v = o.split("=", 1)
        try:
            options[k] = json.loads(v)
        except json.JSONDecodeError:
            options[k] = v
    if args.out:
        doc = run(args.games, args.seeds, args.max_actions, args.workers, Path(args.out),
                  args.only, options)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-explorer-") as tmp:
            doc = run(args.games, args.seeds, args.max_actions, args.workers, Path(tmp),
                      args.only, options)
    print(json.dumps(doc, indent=1))
    return 0
