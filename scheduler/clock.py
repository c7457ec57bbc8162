"""Clocks for the runner: the real monotonic clock, and a virtual one for tests. Each owns the
run's one condition (`cond`): the runner and its game threads share state under it and wait
on it, so a clock can see who is waiting.

The virtual clock advances only when *everyone* waits (the runner and every attached game
thread in `wait` or `sleep`) and then jumps straight to the earliest wake-up, so a test plays
hours of schedule in milliseconds and the same way every time (the runner waits `quiet`: it
decides only once every game thread waits too).

Contract (every call but `now`, `to_monotonic` and `sleep` with `cond` held): `attach()` every
thread that takes part before it runs and `detach()` it when done; `wait(until, ready, quiet)`
returns once `ready()` or the clock reaches `until` (None: never), and whoever changes what a
`ready` reads does it under `cond` and `cond.notify_all()`s; `to_monotonic(t)` is the
`time.monotonic()` value a worker compares its `deadline` with.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable


class RealClock:
    def __init__(self) -> None:
        self.cond = threading.Condition()

    def now(self) -> float:
        return time.monotonic()

    def to_monotonic(self, t: float) -> float:
        return t

    def attach(self) -> None:
        pass

    def detach(self) -> None:
        pass

    def wait(self, until: float | None, ready: Callable[[], bool], quiet: bool = False) -> None:
        while not ready():
            left = math.inf if until is None else until - time.monotonic()
            if left <= 0:
                return
            self.cond.wait(None if left == math.inf else left)


class VirtualClock:
    """Deterministic time shared by the runner's thread and its game threads."""

    def __init__(self, start: float = 0.0):
        self._t = float(start)
        self.cond = threading.Condition()
        self._threads = 0  # attached threads
        self._waiting: dict[int, tuple[float, Callable[[], bool], bool]] = {}  # thread -> (until, ready, quiet)

    def now(self) -> float:
        return self._t

    def to_monotonic(self, t: float) -> float:
        return t  # workers under a virtual clock read this clock, not time.monotonic()

    def attach(self) -> None:
        self._threads += 1

    def detach(self) -> None:
        self._threads -= 1
        self._advance()

    def wait(self, until: float | None, ready: Callable[[], bool], quiet: bool = False) -> None:
        """Block the calling thread until `ready()` or virtual time `until`; `quiet`: and then
        until every other thread waits without being due. One quiet waiter at most (the runner)."""
        me = threading.get_ident()
        self._waiting[me] = (math.inf if until is None else until, ready, quiet)
        try:
            if not self._due(me):
                self._advance()  # only here and in detach: the only moments everyone may wait
                while not self._due(me):
                    self.cond.wait()
        finally:
            del self._waiting[me]

    def sleep(self, seconds: float) -> None:
        """Pass `seconds` of virtual time in the calling (attached) thread."""
        with self.cond:
            self.wait(self._t + max(0.0, seconds), lambda: False)

    # -- under the lock --------------------------------------------------------------------
    def _due(self, tid: int) -> bool:
        """May waiting thread `tid` go on?"""
        until, ready, quiet = self._waiting[tid]
        if self._t < until and not ready():
            return False
        return not quiet or all(not self._due(o) for o in self._waiting if o != tid) and self._all_wait()

    def _all_wait(self) -> bool:
        return len(self._waiting) >= self._threads

    def _advance(self) -> None:
        """If everyone waits: wake whoever may go on, else jump to the earliest wake-up."""
        if not self._waiting or not self._all_wait():
            return
        if not any(self._due(t) for t in self._waiting):
            nxt = min(u for u, _, _ in self._waiting.values())
            if nxt == math.inf:
                return  # nobody would ever wake (the runner always waits with a time-out)
            self._t = max(self._t, nxt)
        self.cond.notify_all()
