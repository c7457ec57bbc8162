"""Pure scheduling policies: from the clock and each game's progress, which games start/stop.

A policy has no clock and does no I/O: `decide(now, budget_end, slots, games)` looks only at
its arguments (seconds since the run started, the time everything must be over, the number
of concurrent slots, and one `GameState` per game) and returns a `Decision`. The same code
therefore runs in the simulator (virtual time over recorded curves) and in the runner
(wall-clock time over real game workers), and is tested on hand-built states.

Two policies:

* `fixed`: the Duck's equal split. Every game gets the same wall-clock allotment, whatever
  its progress; games start in order as slots free up.
* `adaptive`: the same equal share as the base, but every game starts once (an unplayed
  game scores 0) and gets at least `min_play_s`; a game stuck on its first level for
  `stall_s` gets a fresh start of its model context; a game still levelling at the end of
  its share runs on while the queue can still be served, paid if need be by games that
  stalled after their chance (a level, or their fresh start); everything ends `margin_s`
  before `budget_end`. Tuned on passes 0-9 of the Duck's curves (scheduler.simulate).

The thresholds are the config's `scheduler.fixed` and `scheduler.adaptive` sections
(duck/config.py: their defaults and why). The margin is not a threshold but a property of
whoever knows the hard end: the simulator's scenario gives one (stops land up to a stop
latency after they are sent); the notebook gives none, since the budget its runner gets
already ends `kaggle.margin_s` before its own.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence

from duck.config import AdaptiveConfig, FixedConfig, SchedulerConfig

Status = Literal["queued", "running", "done"]


@dataclass
class GameState:
    """What a policy knows about one game (times are seconds since the run started)."""

    game_id: str
    status: Status = "queued"
    started_at: float | None = None
    levels: int = 0
    last_level_at: float | None = None
    actions: int = 0
    fresh_starts: int = 0
    last_fresh_at: float | None = None
    stop_requested: bool = False  # a stop was sent; the worker has not returned yet

    def last_progress_at(self) -> float:
        """Start of the current stretch without progress: start, last level or fresh start."""
        marks = [t for t in (self.started_at, self.last_level_at, self.last_fresh_at) if t is not None]
        return max(marks) if marks else math.inf


@dataclass
class Decision:
    """What to do now. `deadlines` holds the hard end time of every game in `start`."""

    start: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)
    deadlines: dict[str, float] = field(default_factory=dict)
    wake_at: float | None = None  # ask again by then even if nothing happens


class Policy(Protocol):
    name: str

    def decide(
        self, now: float, budget_end: float, slots: int, games: Sequence[GameState]
    ) -> Decision: ...


def _split(games: Sequence[GameState]):
    queued = [g for g in games if g.status == "queued"]
    running = [g for g in games if g.status == "running"]
    return queued, running


def _makespan(free_at: list[float], n_jobs: int, length: float) -> float:
    """When the last of n_jobs jobs of `length` ends, each taking the earliest free slot."""
    heap = sorted(free_at)
    end = 0.0
    for _ in range(n_jobs):
        t = heapq.heappop(heap) + length
        heapq.heappush(heap, t)
        end = max(end, t)
    return end


def _min_future(times, now: float) -> float | None:
    future = [t for t in times if t > now]
    return min(future) if future else None


class FixedPolicy:
    """The Duck's equal split: same time per game, games start in order as slots free up."""

    name = "fixed"

    def __init__(self, config: FixedConfig | None = None):
        self.config = config or FixedConfig()

    def allotment(self, budget_end: float, slots: int, n_games: int) -> float:
        if self.config.allot_s is not None:
            return self.config.allot_s
        waves = math.ceil(n_games / max(1, slots))
        return min(budget_end * slots / max(1, n_games), budget_end / max(1, waves))

    def decide(self, now, budget_end, slots, games):
        allot = self.allotment(budget_end, slots, len(games))
        queued, running = _split(games)
        d = Decision()
        for g in running:
            if not g.stop_requested and now >= g.started_at + allot:
                d.stop.append(g.game_id)
        free = slots - len(running)
        for g in queued[: max(0, free)]:
            d.start.append(g.game_id)
            d.deadlines[g.game_id] = now + allot
        d.wake_at = _min_future([g.started_at + allot for g in running], now)
        return d


class AdaptivePolicy:
    """Progress-aware: fresh-start stalled games, move time from stalled to progressing ones."""

    name = "adaptive"

    def __init__(self, config: AdaptiveConfig | None = None, margin_s: float = 0.0):
        if margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {margin_s}")
        self.config = config or AdaptiveConfig()
        # Everything ends this long before budget_end (see the module docstring).
        self.margin_s = margin_s

    def share(self, end_by: float, slots: int, n_games: int) -> float:
        """Equal share of the usable budget, as `fixed` computes it (waves included)."""
        return FixedPolicy().allotment(end_by, slots, n_games)

    def decide(self, now, budget_end, slots, games):
        c = self.config
        end_by = budget_end - self.margin_s
        share = self.share(end_by, slots, len(games))
        queued, running = _split(games)
        d = Decision()
        active = [g for g in running if not g.stop_requested]
        free = slots - len(running)
        waiting = max(0, len(queued) - free)  # queued games that have no slot yet

        def stall(g: GameState) -> float:
            return now - g.last_progress_at()

        def progressing(g: GameState) -> bool:
            return g.last_level_at is not None and now - g.last_level_at < c.stall_s

        # 1. Stalled games on their first level get a fresh model context.
        for g in active:
            if stall(g) >= c.stall_s and g.fresh_starts < c.max_fresh and g.levels <= c.fresh_max_levels:
                d.fresh.append(g.game_id)

        if waiting > 0:
            over = {g.game_id for g in active if now >= g.started_at + share}
            hot = {g.game_id for g in active
                   if g.game_id in over and c.extend_progressing and progressing(g)}
            freed = {g.game_id for g in running if g.stop_requested} | hot

            def slack() -> float:
                # Calendar time left at the end if every queued game, in order, got
                # min_play_s from the slots as they free up (hot games counted as stopping
                # now). A progressing game's next minutes are worth more than a queued
                # game's minutes past its first fair chance (~0.09 vs ~0.05 points per
                # 100 s in the curves), so the queue is squeezed down to that floor.
                ends = [now] * free + [now if g.game_id in freed else max(now, g.started_at + share)
                                       for g in running]
                return end_by - _makespan(ends, len(queued), c.min_play_s)

            demand = max((g.last_level_at + c.stall_s - now for g in active if g.game_id in hot),
                         default=0.0)
            # 2. Stalled games that had their chance give up the rest of their share, but only
            #    to pay for progressing games: yielding to the queue alone just moves time to
            #    the last games, and it lost on some halves of the curves (won on others).
            spent = [
                g
                for g in active
                if g.game_id not in over
                and g.game_id not in d.fresh
                and stall(g) >= c.stall_s
                and (g.levels > 0 or g.fresh_starts > 0)
                and now - g.started_at >= c.min_play_s
            ]
            for g in sorted(spent, key=stall, reverse=True):
                if waiting <= 0 or not hot or slack() >= demand:
                    break
                d.stop.append(g.game_id)
                freed.add(g.game_id)
                waiting -= 1
            # 3. Past their share: stalled games yield; progressing ones run on while the
            #    queue still fits (re-checked by the time the slack is used up).
            left = slack() if hot else 0.0
            for g in sorted((g for g in active if g.game_id in over),
                            key=lambda g: (g.game_id in hot, g.started_at)):
                if waiting <= 0:
                    break
                if g.game_id in hot and left > 0:
                    continue
                d.stop.append(g.game_id)
                waiting -= 1
            if hot and left > 0:
                d.wake_at = now + left
            # 4. Guard: if the queue cannot get min_play_s each by end_by any more, stop the
            #    games that had min_play_s themselves, those not progressing first.
            freed |= set(d.stop)
            if waiting > 0 and slack() < 0:
                cands = [g for g in active if g.game_id not in freed
                         and now - g.started_at >= c.min_play_s]
                cands.sort(key=lambda g: (progressing(g), g.started_at))
                for g in cands:
                    if waiting <= 0 or slack() >= 0:
                        break
                    d.stop.append(g.game_id)
                    freed.add(g.game_id)
                    waiting -= 1

        # 5. Start queued games in the free slots (stopped ones free theirs when they return);
        #    even a few minutes beat an unplayed game's 0 (10% of level 1s come in 128 s).
        if now < end_by:
            for g in queued[: max(0, free)]:
                d.start.append(g.game_id)
                d.deadlines[g.game_id] = end_by

        # 6. When to look again absent events: the next stall, share or progress threshold.
        marks = [g.last_progress_at() + c.stall_s for g in active]
        marks += [g.started_at + share for g in active]
        marks += [g.started_at + c.min_play_s for g in active]
        marks += [g.last_level_at + c.stall_s for g in active if g.last_level_at is not None]
        if d.wake_at is not None:
            marks.append(d.wake_at)
        d.wake_at = _min_future(marks, now)
        return d


def make_policy(name: str, config: SchedulerConfig | None = None, *, margin_s: float = 0.0) -> Policy:
    """A policy by name with its section of `config` (the config's `scheduler`; default: the
    defaults). `margin_s` is the adaptive policy's; `fixed`, the Duck's split, has none."""
    config = config or SchedulerConfig()
    if name == "fixed":
        if margin_s:
            raise ValueError("the fixed policy (the Duck's split) has no margin")
        return FixedPolicy(config.fixed)
    if name == "adaptive":
        return AdaptivePolicy(config.adaptive, margin_s)
    raise ValueError(f"unknown policy {name!r}; known: fixed, adaptive")
