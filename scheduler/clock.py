"""The runner's clock: the real monotonic clock. It owns the run's one condition (`cond`): the
runner and its game threads share state under it and wait on it, so a clock can see who is
waiting (the tests' virtual clock, tests/scheduler_fakes.py, relies on it).

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
