"""Pure scheduling policies: which games hold the model server's slots.

A policy has no clock and does no I/O: `decide(now, budget_end, slots, games)` looks only at
its arguments (seconds since the run started, the time everything must be over, the server's
slot count, and one `GameState` per game) and returns a `Decision`. The same code runs in the
simulator (`duck simulate`) and in the runner (scheduler.runner), and is tested on hand-built
states. The slot model, the yield points and the four policies (`fixed`, `field`, `ucb`,
`adaptive`): docs/scheduler.md. Progress is counted in generated tokens and actions, never in
seconds: a game's seconds depend on how many others share the server.

The last three share `GatePolicy` (scheduler.state): slots go to the waiting games of highest
`priority`, every game gets a first turn early (`first_turns`), and everything ends `margin_s`
before `budget_end`. The margin belongs to whoever knows the hard end: the notebook's runner
gets a budget that already ends `kaggle.margin_s` before its own, so it passes none.
"""

from __future__ import annotations

import math

from duck.config import FixedConfig, SchedulerConfig

from .adaptive import AdaptivePolicy
from .field import FieldPolicy
from .state import Decision, GameState, GatePolicy, Policy, Status
from .ucb import UcbPolicy

__all__ = ["AdaptivePolicy", "Decision", "FieldPolicy", "FixedPolicy", "GameState", "GatePolicy", "Policy",
           "Status", "UcbPolicy", "make_policy"]


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
        d = Decision()
        running = [g for g in games if g.status == "running"]
        for g in running:
            if not g.stop_requested and now >= g.started_at + allot:
                d.stop.append(g.game_id)
        # A game that yielded anyway (a worker that signals yield points) resumes first.
        waiting = [g for g in games if g.status == "waiting"]
        queued = [g for g in games if g.status == "queued"]
        for g in (waiting + queued)[: max(0, slots - len(running))]:
            d.start.append(g.game_id)
            d.deadlines[g.game_id] = (g.started_at if g.started_at is not None else now) + allot
        d.wake_at = _min_future([g.started_at + allot for g in running], now)
        return d


def make_policy(name: str, config: SchedulerConfig | None = None, *, margin_s: float = 0.0) -> Policy:
    """A policy by name with the config's `scheduler` section (default: the defaults).
    `margin_s`: the gate policies end everything this long before the budget's end; `fixed`,
    the Duck's split, has none."""
    config = config or SchedulerConfig()
    if name == "fixed":
        if margin_s:
            raise ValueError("the fixed policy (the Duck's split) has no margin")
        return FixedPolicy(config.fixed)
    known = {"field": FieldPolicy, "ucb": UcbPolicy, "adaptive": AdaptivePolicy}
    if name not in known:
        raise ValueError(f"unknown policy {name!r}; known: fixed, {', '.join(known)}")
    return known[name](config, margin_s)
