"""Clocks for the runner: the real monotonic clock, and a virtual one for tests.

Why a virtual clock: the runner's job is timing (who starts when, who is stopped, whether
every deadline holds), and testing that against wall-clock sleeps is slow and flaky. The
virtual clock advances only when *everyone* is waiting - the runner in `wait`, every
worker thread in `sleep` - and then jumps straight to the earliest wake-up. A worker that
is computing, or a runner with news to process, holds time still, so a test plays hours of
schedule in milliseconds and always the same way.

Contract between the runner and a clock:
* `now()`: seconds on this clock; `to_monotonic(t)`: the `time.monotonic()` value a worker
  must compare with (its `deadline`), identity for the real clock.
* `attach()` before a worker thread starts, `detach()` once the runner has seen it finish.
* `notify()` from any thread that has news for the runner (before returning to work).
* `await wait(until, event)`: the runner sleeps until `until` (None: forever) or news.
* `park(event, until)` in a worker thread: wait until the runner `unpark(event)`s it or
  `until` passes (a game that gave up its slot waits for the next one this way).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    def to_monotonic(self, t: float) -> float:
        return t

    def attach(self) -> None:
        pass

    def detach(self) -> None:
        pass

    def notify(self) -> None:
        pass

    def park(self, event: threading.Event, until: float | None) -> None:
        event.wait(None if until is None else max(0.0, until - self.now()))

    def unpark(self, event: threading.Event) -> None:
        event.set()

    async def wait(self, until: float | None, event: asyncio.Event) -> None:
        timeout = None if until is None else max(0.0, until - self.now())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        event.clear()


class VirtualClock:
    """Deterministic time shared by an asyncio runner and its worker threads."""

    def __init__(self, start: float = 0.0):
        self._t = float(start)
        self._cv = threading.Condition()
        self._workers = 0  # attached worker threads
        self._sleeping: dict[int, float] = {}  # sleeping thread -> wake time
        self._parked: dict[int, threading.Event] = {}  # parked thread -> what unparks it
        self._runner: tuple[float, asyncio.AbstractEventLoop, asyncio.Future] | None = None
        # News that came while the runner was not waiting: its asyncio event is set from
        # the loop's callback queue, which has not run yet when the runner next waits, so
        # without this the next wait could let time jump past the news.
        self._pending = False

    def now(self) -> float:
        return self._t

    def to_monotonic(self, t: float) -> float:
        return t  # workers under a virtual clock read this clock, not time.monotonic()

    def attach(self) -> None:
        with self._cv:
            self._workers += 1

    def detach(self) -> None:
        with self._cv:
            self._workers -= 1
            self._advance()

    def notify(self) -> None:
        with self._cv:
            if self._runner is None:
                self._pending = True
            self._wake_runner()

    def sleep(self, seconds: float) -> None:
        """Block the calling worker thread for `seconds` of virtual time."""
        me = threading.get_ident()
        with self._cv:
            target = self._t + max(0.0, seconds)
            self._sleeping[me] = target
            self._advance()
            while self._t < target:
                self._cv.wait()
            del self._sleeping[me]

    def park(self, event: threading.Event, until: float | None) -> None:
        """Block the calling worker thread until `unpark(event)` or virtual time `until`."""
        me = threading.get_ident()
        with self._cv:
            if event.is_set():
                return
            target = math.inf if until is None else until
            self._sleeping[me], self._parked[me] = target, event
            self._advance()
            while not event.is_set() and self._t < target:
                self._cv.wait()
            self._sleeping.pop(me, None)
            self._parked.pop(me, None)

    def unpark(self, event: threading.Event) -> None:
        """Wake the thread parked on `event`; it counts as busy (holds time still) at once,
        before it has even woken, so that time cannot jump under its feet."""
        with self._cv:
            event.set()
            for tid, e in list(self._parked.items()):
                if e is event:
                    self._sleeping.pop(tid, None)
            self._cv.notify_all()

    async def wait(self, until: float | None, event: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._cv:
            if self._pending or event.is_set() or (until is not None and until <= self._t):
                self._pending = False
                event.clear()
                return
            self._runner = (math.inf if until is None else until, loop, fut)
            self._advance()
        await fut
        event.clear()

    # -- under the lock --------------------------------------------------------------------
    def _wake_runner(self) -> None:
        if self._runner is not None:
            _, loop, fut = self._runner
            self._runner = None
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

    def _advance(self) -> None:
        """If everyone waits, jump to the earliest wake-up and wake whoever is due."""
        if self._runner is None or len(self._sleeping) < self._workers:
            return
        nxt = min([self._runner[0], *self._sleeping.values()])
        if nxt == math.inf:
            self._wake_runner()  # nobody would ever wake: let the runner see it
            return
        self._t = max(self._t, nxt)
        self._cv.notify_all()
        if self._runner[0] <= self._t:
            self._wake_runner()
