"""The worker frozen between calls (host side, issue 37).

Between two calls the worker has nothing to do: the gap is the model's thinking (on Kaggle,
tens of seconds per turn). A `setitimer` handler or a profile hook left by one call burnt a
core in every gap and could act outside any call. So after its `done` the worker gets SIGSTOP
(every thread of it stops; SIGKILL still ends it), and before the next call SIGCONT. Its CPU
time (/proc/<pid>/stat: user and system, every thread) is read when it has stopped and again
before it is woken: anything it used meanwhile means something woke it (a process of its
session may send SIGCONT whatever its uid), and the host restarts it (duck.sandbox.host).

`Frozen.freeze(pid)`; `Frozen.burnt()` -> CPU seconds used since (None when unreadable);
`Frozen.thaw()`.
"""

from __future__ import annotations

import os
import signal
import time

STOP_WAIT_S = 1.0  # how long the host waits to see the worker stopped
BURNT_S = 0.05  # CPU seconds a frozen worker may seem to use (the clock tick: 10 ms)
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, CPU seconds) of a process, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


class Frozen:
    """The one worker process this host has stopped, if any, and its CPU time then."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.cpu: float | None = None

    def freeze(self, pid: int) -> None:
        """SIGSTOP, then wait (up to STOP_WAIT_S) until it is seen stopped, and note its CPU time."""
        self.thaw()
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            return
        self.pid = pid
        end = time.monotonic() + STOP_WAIT_S
        while (st := _stat(pid)) is not None and st[0] not in "Tt" and time.monotonic() < end:
            time.sleep(0.0002)
        self.cpu = st[1] if st is not None else None

    def burnt(self) -> float | None:
        """CPU seconds the frozen worker used since it stopped (None: not frozen or unreadable)."""
        if self.pid is None or self.cpu is None:
            return None
        st = _stat(self.pid)
        return None if st is None else st[1] - self.cpu

    def thaw(self) -> None:
        """SIGCONT to the stopped worker, if there is one."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except OSError:
                pass
        self.pid = self.cpu = None
