"""Ctrl-C during `duck play`: the first stops the run cleanly, the second kills it at once.

The first SIGINT (or a SIGTERM) sets the run's stop event: every game ends at its next action,
the queued games never start, and the run writes score.json marked partial and exits 130. The
second SIGINT calls `kill` (the worker processes are SIGKILLed) and leaves with
`os._exit(130)`: the records keep every line written so far, and `duck play --resume` replays
the games it cut.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C


class Interrupts:
    """The run's signal handlers while it plays (installed only from the main thread; a run
    played from another thread keeps the handlers it found)."""

    def __init__(self, stop: Any, *, on_stop: Callable[[str], None], kill: Callable[[], None],
                 on_kill: Callable[[], None]) -> None:
        self.stop, self.on_stop, self.kill, self.on_kill = stop, on_stop, kill, on_kill
        self.reason: str | None = None  # "Ctrl-C" or "SIGTERM" once asked to stop
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.reason is None:
            self.reason = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            self.stop.set()
            self.on_stop(self.reason)
            return
        if signum != signal.SIGINT:
            return  # a repeated SIGTERM: still stopping cleanly
        try:
            self.kill()
            self.on_kill()
        finally:
            os._exit(EXIT_INTERRUPTED)
