"""The slot book: the slot rules, written once, for the runner and the simulator.

`decide(now)` asks the policy and applies its `Decision` (stops, preemptions, grants best first:
never more than `slots` held, none at or after the budget's end, a game's deadline set at its
first grant); `release` is a yield point, `end` a game over, `overdue` stops every game whose
deadline has come. A `parked` game (its model server is down: GameState.parked) is granted
nothing until it unparks, and while one is parked no game starts.

Stopping is where the two callers differ, so it is the caller's `on_stop(game_id, now)`: the
runner sets the worker's stop event (the slot stays held until the worker returns); the
simulator ends the game on the spot. The book has no clock and never blocks: the caller passes
`now` (seconds since the start) and serialises the calls. `timeline` records every grant and
release, `(t, game_id, "grant" | "release", why)`.
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Sequence

from .state import GameState, Policy

LIVE = ("running", "waiting")


class SlotBook:
    """Who holds a model-server slot, under `policy`, within `budget_s` (see the module)."""

    def __init__(self, states: Sequence[GameState], *, slots: int, budget_s: float, policy: Policy,
                 on_stop: Callable[[str, float], None]):
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.order = list(states)  # what the policy sees, in the caller's order
        self.states = {s.game_id: s for s in self.order}
        self.slots, self.budget_s, self.policy, self.on_stop = slots, budget_s, policy, on_stop
        self.held = 0  # games holding a slot now
        self.max_held = 0
        self.deadlines: dict[str, float] = {}  # set at a game's first grant
        self.ended_at: dict[str, float] = {}
        self.recheck: dict[str, int] = {}  # the last decision's: look again at these token counts
        self.wake_at: float | None = None  # the last decision's: look again by then
        self.timeline: list[tuple[float, str, str, str]] = []
        self._due: list[tuple[float, str]] = []  # (deadline, game) heap

    # -- the policy's decisions -------------------------------------------------------------
    def decide(self, now: float) -> list[tuple[str, str]]:
        """Ask the policy and apply its decision; returns the grants, best first."""
        d = self.policy.decide(now, self.budget_s, self.slots, self.order)
        for gid in d.stop:
            self.stop(gid, now)
        for gid in d.preempt:
            st = self.states[gid]
            if st.status == "running" and not st.stop_requested:
                st.preempt_requested = True
        self.recheck, self.wake_at = d.recheck, d.wake_at
        grants = []
        free = self.slots - self.held
        outage = any(s.parked for s in self.order)  # a new game would only park too
        for gid in d.start:
            if free <= 0 or now >= self.budget_s:
                break
            st = self.states[gid]
            if st.status == "queued" and not outage:
                kind = "start"
            elif st.status == "waiting" and not st.stop_requested and not st.parked:
                kind = "resume"
            else:
                continue
            st.grant(now)
            if gid not in self.deadlines:  # whatever the policy says, never past the budget
                self.deadlines[gid] = min(d.deadlines.get(gid, self.budget_s), self.budget_s)
                heapq.heappush(self._due, (self.deadlines[gid], gid))
            free -= 1
            self.held += 1
            self.max_held = max(self.max_held, self.held)
            self.timeline.append((now, gid, "grant", kind))
            grants.append((gid, kind))
        return grants

    # -- what the games do --------------------------------------------------------------------
    def release(self, gid: str, reason: str, now: float) -> None:
        """A yield point: the game gives up its slot and waits to be granted one again."""
        st = self.states[gid]
        if st.status == "running":
            st.release()
            self.held -= 1
            self.timeline.append((now, gid, "release", reason))

    def end(self, gid: str, now: float) -> None:
        """The game is over (its worker returned, its curve ran out, or it was stopped)."""
        st = self.states[gid]
        if st.status == "running":
            self.held -= 1
            self.timeline.append((now, gid, "release", "end"))
        st.status = "done"
        self.ended_at[gid] = now

    # -- stopping -----------------------------------------------------------------------------
    def stop(self, gid: str, now: float) -> None:
        """End a game for good (once): the caller's `on_stop` says how."""
        st = self.states[gid]
        if st.status in LIVE and not st.stop_requested:
            st.stop_requested = True
            self.on_stop(gid, now)

    def overdue(self, now: float) -> None:
        """Stop every game whose deadline has come."""
        while self._due and self._due[0][0] <= now:
            self.stop(heapq.heappop(self._due)[1], now)

    def next_deadline(self) -> float:
        """The earliest deadline not yet handled of a game not over (inf: none)."""
        while self._due and self.states[self._due[0][1]].status == "done":
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else math.inf

    # -- views ----------------------------------------------------------------------------------
    def live(self) -> bool:
        """Does any game hold a slot or wait for one (a worker still plays)?"""
        return any(s.status in LIVE for s in self.order)

    def queued(self) -> int:
        return sum(s.status == "queued" for s in self.order)

    @property
    def last_end(self) -> float:
        return max(self.ended_at.values(), default=0.0)
