"""What model code can leave running outside its call, undone by the worker (issue 37).

A SIGALRM timer (`setitimer`) or a profile hook left by one call burnt CPU in every gap
between calls and could act outside any call. The host freezes the worker between calls
(duck.sandbox.freeze); the worker itself, after each snippet and before the next, resets
what a snippet may have installed: profile and trace hooks (its thread's, new threads',
sys.monitoring's tools), the interval timers, and every signal handler back to the worker's
own (`handlers()`, taken once at start). Threads that outlive a call are the host's
(duck.sandbox.lifecycle: a restart).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


def handlers() -> dict[int, Any]:
    """Every catchable signal's handler now."""
    out = {}
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                out[sig] = signal.getsignal(sig)
            except (OSError, ValueError):
                pass
    return out


def reset_hooks(saved: dict[int, Any]) -> None:
    """Profile and trace hooks off, interval timers stopped, every signal handler back to
    `saved` (the module docstring says why)."""
    sys.setprofile(None)
    sys.settrace(None)
    threading.setprofile(None)
    threading.settrace(None)
    for tool in range(6):  # sys.monitoring's tool ids (6 and 7 are setprofile's and settrace's)
        try:
            sys.monitoring.set_events(tool, 0)
            sys.monitoring.free_tool_id(tool)
        except ValueError:
            pass
    for which in _TIMERS:
        try:
            if signal.getitimer(which) != (0.0, 0.0):  # (only then: seccomp may deny setitimer)
                signal.setitimer(which, 0)
        except OSError:
            pass
    for sig, handler in saved.items():
        try:
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        except (OSError, ValueError, TypeError):
            pass
