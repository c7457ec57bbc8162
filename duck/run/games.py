"""One game of a run, played in the run's own process or in a worker process, and what it
tells the run while it plays.

A game reports to a `sink` (a function of one dict): `start` (its policy and level count),
`progress` (levels, actions, score so far: at most every `PROGRESS_EVERY_S` and at every
level change), `fallback` (the model policy handed the game to its fallback, and why) and,
as `play_one`'s result, `end`. In a worker process the sink is a multiprocessing queue and
logging goes through it too (`init_worker`). A full disk (ENOSPC, EDQUOT) ends the game like a
stop: the run's stop event is set, and the game returns `disk_full`.
"""

from __future__ import annotations

import errno
import logging
import logging.handlers
import os
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from duck.config import Config
from duck.game.source import GameSource
from duck.play.scoring import game_score
from duck.play.session import Progress, play_game
from duck.policies import make_policy

PROGRESS_EVERY_S = 0.25  # a live line redraws a few times a second; more is wasted messages
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
FULL_WORDS = tuple(os.strerror(e) for e in DISK_FULL)  # how play_game's recorded error names them

# Set once per worker process (init_worker) or by the run for games played in its own process.
_stop: Any = None  # an Event: set by Ctrl-C or a full disk; every game ends at its next action
_sink: Callable[[dict], None] | None = None


def init_worker(stop: Any, queue: Any) -> None:
    """A worker process: Ctrl-C is the parent's (it sets `stop`), messages and log records go
    to `queue`."""
    global _stop, _sink
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the run's handler, which the fork copied
    _die_with_parent()
    _stop, _sink = stop, queue.put
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(logging.handlers.QueueHandler(queue))


def _die_with_parent() -> None:
    """A worker whose run was killed (SIGKILL, OOM) must not play on alone: Linux's parent-death
    signal kills it with its parent (elsewhere: nothing; the pool's own pipes end it later)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(1)


def use_here(stop: Any, sink: Callable[[dict], None]) -> None:
    """Games played in the run's own process (one worker): the same stop event and sink."""
    global _stop, _sink
    _stop, _sink = stop, sink


def stop_event() -> Any:
    """The run's stop event in this process (None outside a run)."""
    return _stop


def sink() -> Callable[[dict], None] | None:
    """Where this process's games send their messages (None: nowhere)."""
    return _sink


def is_disk_full(e: BaseException | str | None) -> bool:
    if isinstance(e, OSError):
        return e.errno in DISK_FULL
    return isinstance(e, str) and any(w in e for w in FULL_WORDS)


class Tracker:
    """A game's progress as the run shows it: the score so far from the actions at which each
    level was completed (the same arithmetic as duck.play.scoring.score_record)."""

    def __init__(self, game_id: str, baselines: list[int] | None,
                 sink: Callable[[dict], None] | None) -> None:
        self.game_id, self.baselines, self.sink = game_id, baselines or [], sink
        self.levels, self.start, self.level_actions = 0, 0, []
        self.actions, self.score, self.last_sent = 0, 0.0, 0.0
        self.fallback: str | None = None

    def send(self, kind: str, **fields: Any) -> None:
        if self.sink is not None:
            self.sink({"kind": kind, "game": self.game_id, **fields})

    def progress(self, p: Progress) -> None:
        level_up = p.levels > self.levels
        if level_up:
            self.level_actions += [p.actions - self.start] + [0] * (p.levels - self.levels - 1)
            self.levels, self.start = p.levels, p.actions
            self.score = game_score(self.baselines, self.level_actions)
        self.actions = p.actions
        now = time.monotonic()
        if level_up or now - self.last_sent >= PROGRESS_EVERY_S:
            self.last_sent = now
            self.send("progress", levels=p.levels, actions=p.actions, score=self.score, state=p.state)

    def on_fallback(self, message: str) -> None:
        self.fallback = message
        self.send("fallback", message=message)


def play_one(games_dir: str, game_id: str, cfg: Config, out: str, health_flag: str | None = None) -> dict:
    """Play one game into `out/records/<game_id>.jsonl`; returns its `end` message (or
    `skipped` when the run was stopped before the game began: no record is written)."""
    if _stop is not None and _stop.is_set():
        return {"kind": "skipped", "game": game_id}
    p = cfg.play
    source = GameSource.offline(games_dir)
    info = next((g for g in source.games() if g.game_id == game_id), None)
    tracker = Tracker(game_id, info.baselines if info else None, _sink)
    health = None
    if health_flag:  # a model plays: its client comes with it
        from duck.llm.health import ModelHealth
        health = ModelHealth(Path(health_flag))
    if p.policy == "llm":  # the command's spend guard: every client of this process counts into it
        from duck.llm import guard
        guard.install(guard.Guard(Path(out) / guard.LEDGER, max_tokens=cfg.model.max_total_tokens,
                                  max_cost=cfg.model.max_cost, stop=_stop))
    policy = make_policy(p.policy, p.seed, config=cfg, health=health, on_fallback=tracker.on_fallback,
                         probe_on_failure=health is not None)
    tracker.send("start", policy=policy.name, levels_total=len(tracker.baselines))
    try:
        r = play_game(source, game_id, policy, max_actions=p.max_actions,
                      record_path=Path(out) / "records" / f"{game_id}.jsonl", stop=_stop,
                      on_progress=tracker.progress, seed=p.seed, config=cfg.model_dump(mode="json"),
                      conversation=p.conversations)
    except OSError as e:  # the record itself could not be written: stop the run, keep what is there
        if not is_disk_full(e):
            raise
        if _stop is not None:
            _stop.set()
        return {"kind": "end", "game": game_id, "levels": tracker.levels, "actions": tracker.actions,
                "score": tracker.score, "end_reason": "disk_full", "state": "",
                "error": f"{e.strerror}: {e.filename or out}", "policy": policy.name,
                "fallback": tracker.fallback}
    end = {"kind": "end", **asdict(r), "game": game_id, "policy": policy.name, "fallback": tracker.fallback}
    end.pop("game_id")
    if is_disk_full(r.error):
        end["end_reason"] = "disk_full"
        if _stop is not None:
            _stop.set()
    return end
