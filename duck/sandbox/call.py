"""One call's process: the snippet, run in a process forked for it (worker side, issue 48).

The worker (duck.sandbox.worker) never runs model code: for each `run` it forks this process,
which finishes confining itself before any model code runs (its parent-death signal, a CPU
limit of this call's alone, hard and soft, one process, the seccomp filter's call part: no new
process, signals to itself only, prctl reads only; it is born dumpable, for the host's count), takes
the namespace the last call left (duck.sandbox.carry, rebuilt without running model code),
runs the snippet with stdout and stderr captured, and at the end writes the namespace back to
the worker and its `done` to the host. Then it is killed: whatever the snippet left running
(a handler, a hook, a patched function of ours, a thread) ends with it.

At the call's time limit the host sends SIGUSR1, which raises `KernelTimeout` in the snippet;
the host kills the process if the snippet swallows it or is stuck in C code. Tracebacks show the
snippet's frames with their source lines (`<cell-N>`), never the sandbox's own.
"""

from __future__ import annotations

import io
import json
import linecache
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any

from duck.sandbox import carry, restore, wire
from duck.sandbox.guard import namespace_builtins
from duck.sandbox.wall.confine import NPROC, prctl

Worker = Any  # duck.sandbox.worker.Worker (which imports this module): its state and its pipe

PR_SET_PDEATHSIG = 1
CARRY_MB = 128  # the namespace a call may leave to the next (more is left out, name by name)
MAX_RESULT_CHARS = 1_000_000  # a `result` or `notes` larger than this is not sent to the host
MAX_RESULT_NODES = wire.MAX_NODES // 2  # and values (the host refuses a message of more than MAX_NODES)
ERROR_CHARS = 20_000  # of an error's text (the host keeps no more)
_SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# What the worker publishes into the namespace on every call: never carried.
GAME_NAMES = {"current_frame", "latest_frame", "history", "transitions", "last_transition", "previous_frame",
              "last_action_frame", "last_action", "valid_actions", "last_action_result", "action",
              "last_animation", "result"}


class KernelTimeout(BaseException):
    """Raised inside the snippet when its time limit is reached."""


class StopSnippet(BaseException):
    """Raised by action() when the host ends the snippet (a guard said so)."""


class Capture(io.TextIOBase):
    """stdout/stderr of a call: the head streams to the host as it is written, a rolling
    tail is kept here and synced every 0.25 s, so a killed call still shows its output."""

    def __init__(self, send: Any, head: int, tail: int) -> None:
        self.send, self.head, self.tail = send, head, tail
        self.total = self.sent = 0
        self.tailbuf = ""
        self.synced = time.monotonic()

    def write(self, s: Any) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        self.total += n
        room = self.head - self.sent
        if room > 0 and s:
            part = s[:room]
            self.sent += len(part)
            self.send({"op": "out", "text": part})
            s = s[room:]
        if s and self.tail > 0:
            self.tailbuf = s[-self.tail:] if len(s) >= self.tail else (self.tailbuf + s)[-self.tail:]
            if time.monotonic() - self.synced > 0.25:
                self.sync()
        return n

    def sync(self) -> None:
        self.synced = time.monotonic()
        self.send({"op": "tail", "text": self.tailbuf, "total": self.total})

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def close(self) -> None:  # model code closing stdout must not break the rest of the call
        pass


def json_safe(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy; objects become their str(); nesting past 100 levels (a list that
    holds itself) is cut."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if depth >= 100:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


def sized(value: Any, what: str) -> Any:
    """`value` if its JSON fits in MAX_RESULT_CHARS and MAX_RESULT_NODES, else a short note."""
    text = json.dumps(value)
    n, values = len(text), wire.nodes(text.encode("utf-8", "surrogatepass"))
    if n <= MAX_RESULT_CHARS and values <= MAX_RESULT_NODES:
        return value
    return f"<{what} of {n} characters ({values} values or fewer): too large to send; print a part of it>"


def format_error(exc: BaseException) -> str:
    """The snippet's frames with their source lines, plus the library frame where it failed
    (never the sandbox's own frames, e.g. inside `action()`). Of a very deep traceback
    (runaway recursion) only the first and last 30 frames, so formatting stays fast."""
    pairs = []
    tb = exc.__traceback__
    while tb is not None:
        pairs.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    if len(pairs) > 60:
        pairs = pairs[:30] + pairs[-30:]
    stack = traceback.StackSummary.extract(iter(pairs), lookup_lines=False)
    keep = [f for f in stack if f.filename.startswith("<cell-")]
    last = stack[-1].filename if stack else "<cell-"
    if not last.startswith("<cell-") and not last.startswith(_SANDBOX_DIR):
        keep.append(stack[-1])
    out = ["Traceback (most recent call last):\n"] + traceback.format_list(keep)
    out += traceback.format_exception_only(exc)
    return "".join(out).rstrip()


def confine(w: Worker, msg: dict[str, Any]) -> None:
    """What the call's process adds to the worker's layers before any model code runs."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # (a fork clears it)
    if os.getppid() != parent:
        os._exit(1)  # the worker died before the line above
    cpu = int(float(msg.get("timeout", 30))) + 5  # CPU seconds of this process alone: its own hard limit
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if resource.getrlimit(resource.RLIMIT_NPROC)[1] == NPROC:  # a uid of its own: the worker and this call
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))  # no thread, no child
    if w.seccomp:
        from duck.sandbox.wall import seccomp
        seccomp.load(seccomp.CALL, os.getpid())


def run(w: Worker, msg: dict[str, Any], keep_fd: int) -> None:
    """The call's whole life, from a fresh fork of the worker to its `done`."""
    confine(w, msg)
    ns: dict[str, Any] = {"__builtins__": namespace_builtins(), "__name__": "__main__"}
    restored = restore.load(w.saved, ns, w.view)
    w.saved = b""
    w.ns = ns
    w.valid = list(msg.get("valid", w.valid))  # (a refused action's [] lasts only to its call's end)
    w.publish(ns)
    ns["result"] = None
    cap = Capture(w.send, int(msg["head"]), int(msg["tail"]))
    sys.stdout = sys.stderr = cap
    try:
        kind, error = execute(w, msg["code"], f"<cell-{w.call}>")
    finally:
        w.armed = False
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    done: dict[str, Any] = {"op": "done", "kind": kind and kind[:100], "error": error and error[:ERROR_CHARS],
                            "total": cap.total, "tail": cap.tailbuf}
    convert(w, done)
    blob, dropped = carry.dump(ns, GAME_NAMES, w.view_ids, CARRY_MB << 20)
    view = memoryview(blob)
    while view:
        view = view[os.write(keep_fd, view):]
    os.close(keep_fd)
    done["dropped"] = [name[:200] for name in dropped[:50]]
    if restored:
        done["restored"] = restored
    w.write(done)


def execute(w: Worker, code: str, filename: str) -> tuple[str | None, str | None]:
    """Run the snippet in the namespace: (kind, error); kind None when it ended normally,
    else syntax, timeout, stopped (the host ended it) or the exception's class name."""
    try:
        compiled = carry.compile_cell(code, filename)
    except (SyntaxError, ValueError) as e:
        return "syntax", "".join(traceback.format_exception_only(e)).rstrip()
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # tracebacks show it
    try:
        w.armed = True
        try:
            exec(compiled, w.ns)
        finally:
            w.armed = False
    except KernelTimeout as e:
        return "timeout", format_error(e)  # where the time ran out
    except StopSnippet:
        return "stopped", None
    except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too
        return type(e).__name__, format_error(e)
    return None, None


def convert(w: Worker, done: dict[str, Any]) -> None:
    """`result` and `notes` into the done message. Converting them runs model code
    (__str__, __iter__): under the call's time limit too."""
    w.pending = False
    try:
        w.armed = True
        try:
            done["result"] = sized(json_safe(w.ns.get("result")), "result")
        except BaseException:  # noqa: BLE001 - a hostile __str__, a time-out
            done["result"] = "<result could not be converted>"
        notes = w.ns.get("notes")
        if isinstance(notes, dict):
            try:
                text = json.dumps(json_safe(notes))
                if len(text) <= int(w.cfg["notes_chars"]):
                    w.notes = json.loads(text)
                else:
                    done["notes_error"] = f"notes too large ({len(text)} chars); not kept"
            except BaseException as e:  # noqa: BLE001
                done["notes_error"] = f"notes not kept: {type(e).__name__}: {e}"[:500]
        done["notes"] = w.notes
    except KernelTimeout:
        done["result"] = "<result could not be converted in time>"
    finally:
        w.armed = False
