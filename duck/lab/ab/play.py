"""Playing the paired units of an A/B experiment (duck.lab.ab.run): a unit is one (game, pass), played
once per arm with the same seed; A and B are queued next to each other, who goes first
alternating, and start on the same model endpoint. Finished records are never replayed (a
record cut by Ctrl-C is played again from its start). Also
the games of an experiment and the `--shard i/n` share of its units."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from duck.config import Config
from duck.game.source import GameError, GameSource, offline_game_ids
from duck.lab.ab.config import ARMS, policy_options
from duck.play.session import play_game
from duck.policies import make_policy
import duck.run.games as game_runs
from duck.run import record_complete
from duck.run.games import Tracker
from duck.run.pool import Runner
from duck.seeds import stable_hash

log = logging.getLogger("duck.lab.ab.run")  # one log for the whole experiment (duck ab)


def record_path(out: Path, arm: str, pass_: int, game_id: str) -> Path:
    return out / arm / f"p{pass_:03d}" / "records" / f"{game_id}.jsonl"


def label(arm: str, pass_: int, game_id: str) -> str:
    """A unit arm's row in the progress display: `A p0 <game>`."""
    return f"{arm.upper()} p{pass_} {game_id}"


def _run_arm(task: dict[str, Any]) -> dict[str, Any]:
    """One arm of one (game, pass): a fresh policy, a fresh game, a fresh record; its progress
    and end go to the run's display (duck.run.games), the run's stop ends it at its next action."""
    stop = game_runs.stop_event()
    if stop is not None and stop.is_set():
        return {"kind": "skipped", "game": task["label"]}
    cfg = Config.model_validate(task["config"])
    path = Path(task["record"])
    if path.exists():
        path.unlink()  # an unfinished record of an interrupted run: play the unit again
    source = GameSource.offline(task["games_dir"])
    meta = next((g for g in source.games() if g.game_id == task["game_id"]), None)
    tracker = Tracker(task["label"], meta.baselines if meta else None, game_runs.sink())
    policy = make_policy(cfg.play.policy, task["seed"],
                         **policy_options(cfg, unit_index=task["unit_index"], pass_=task["pass"]))
    tracker.send("start", policy=policy.name, levels_total=len(tracker.baselines))
    deadline = time.monotonic() + task["game_seconds"] if task.get("game_seconds") else None
    t0 = time.monotonic()
    res = play_game(source, task["game_id"], policy, max_actions=cfg.play.max_actions, record_path=path,
                    seed=task["seed"], deadline=deadline, pass_=task["pass"], conversation=cfg.play.conversations,
                    stop=stop, on_progress=tracker.progress,
                    config={"arm": task["arm"], "url": task["url"], **cfg.model_dump(mode="json")})
    return {"kind": "end", "game": task["label"], "arm": task["arm"], "game_id": res.game_id, "pass": task["pass"],
            "score": res.score, "levels": res.levels, "actions": res.actions, "end_reason": res.end_reason,
            "state": res.state, "seconds": round(time.monotonic() - t0, 2), "error": res.error,
            "policy": policy.name}


def arm_order(game_id: str, pass_: int) -> tuple[str, str]:
    """Alternate which arm is queued first, stably across shards and resumes."""
    return ARMS if stable_hash(game_id, pass_) % 2 == 0 else ARMS[::-1]


def unit_index(games: list[str], game_id: str, pass_: int) -> int:
    """A unit's place in the round robin over model endpoints (stable across shards)."""
    return pass_ * len(games) + games.index(game_id)


def run_units(units: list[tuple[str, int]], *, out: Path, games_dir: Path, configs: dict[str, Config],
              games: list[str], runner: Runner, game_seconds: float | None = None,
              shards: int = 1) -> list[dict]:
    """Play both arms of each (game, pass) unit, A and B next to each other in the queue, with
    the experiment's `runner` (duck.run.pool: its workers, display and Ctrl-C); returns the end
    message of each arm played.

    With `shards` n, this machine holds the units k ≡ i-1 (mod n): the endpoint round robin
    runs over k // n, the unit's place in this shard, so that every one of this machine's
    servers gets work (k itself would pin a shard to one server when n and the number of
    URLs share a factor, e.g. 4 nodes of 4 GPUs)."""
    jobs = []
    for game_id, p in units:
        k = unit_index(games, game_id, p) // shards
        for arm in arm_order(game_id, p):
            path = record_path(out, arm, p, game_id)
            if record_complete(path):
                continue
            urls = configs[arm].model.urls
            task = {"arm": arm, "game_id": game_id, "pass": p, "seed": p, "record": str(path),
                    "games_dir": str(games_dir), "config": configs[arm].model_dump(mode="json"),
                    "unit_index": k, "url": urls[k % len(urls)] if urls else None,
                    "game_seconds": game_seconds, "label": label(arm, p, game_id)}
            jobs.append((task["label"], (task,)))
    if not jobs:
        return []
    if runner.view is not None:
        runner.view.add([name for name, _ in jobs])
    ends = runner.run(_run_arm, jobs)
    for r in ends:
        if r.get("kind") == "end" and "arm" in r:
            log.info("%s: score %.3f, levels %d, actions %d, %s%s", r["game"], r["score"], r["levels"],
                     r["actions"], r["end_reason"], f" ({r['error']})" if r["error"] else "")
    return ends


def select_games(games_dir: Path, only: list[str] | None) -> list[str]:
    """The experiment's games: those of `games_dir` that `only` names (all without it)."""
    try:
        return offline_game_ids(games_dir, only)
    except GameError as e:
        raise SystemExit(str(e)) from None


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not (n >= 1 and 1 <= i <= n):
        raise SystemExit(f"--shard {text!r}: i must be 1..n (1-based)")
    return i, n
