"""The kernel's worker process: runs model code in a persistent namespace.

Started by `duck.sandbox.host.Kernel` (through duck.sandbox.process) as `python -s -m
duck.sandbox.worker RFD WFD` in a session of its own, a temporary working directory and a
scrubbed environment; its config is the first message on the pipe. It keeps
the game variables (frames, history, transitions, ...: duck.sandbox.views) as Python objects
and receives only *new* observations from the host, so an `action()` call costs the same at
step 1,000 as at step 10. The host owns the game: `action()` sends
a request over the pipe and wait for the result and the new boards (`Worker.request`).

Before it reads anything from the host it confines itself (duck.sandbox.wall.confine: namespaces,
Landlock, hard limits, its own uid, seccomp) and reports the layers in its `ready` message.
The in-process fences (audit hook, imports: `duck.sandbox.guard`) only give clear messages.
Every message it writes carries the id of the call it belongs to (the host refuses any other).
Between calls the host keeps it frozen (SIGSTOP), and it resets what a snippet may leave
running (duck.sandbox.hooks) after each snippet and before the next.
At the call's time limit the host sends SIGUSR1, which raises `KernelTimeout` in the snippet
(the namespace survives); the host kills the process group if the snippet swallows it or is
stuck in C code. Tracebacks show the snippet's frames with their source lines (`<cell-N>`),
never the sandbox's own.
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

import numpy as np

from duck.game.animation import summarize_animation
from duck.sandbox import wire
from duck.sandbox.guard import namespace_builtins
from duck.sandbox.hooks import handlers, reset_hooks
from duck.sandbox.probe import begin
from duck.sandbox.views import FrameView, HistoryEntryView, TransitionView, normalize_actions

RECURSION_LIMIT = 10_000
_SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


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

    def close(self) -> None:  # model code closing stdout must not break the next call
        pass


MAX_RESULT_CHARS = 1_000_000  # a `result` or `notes` larger than this is not sent to the host


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


MAX_RESULT_NODES = wire.MAX_NODES // 2  # and values (the host refuses a message of more than MAX_NODES)
ERROR_CHARS = 20_000  # of an error's text (the host keeps no more)


def sized(value: Any, what: str) -> Any:
    """`value` if its JSON fits in MAX_RESULT_CHARS and MAX_RESULT_NODES, else a short note
    saying so."""
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
    if stack and not stack[-1].filename.startswith("<cell-") and not stack[-1].filename.startswith(_SANDBOX_DIR):
        keep.append(stack[-1])
    out = ["Traceback (most recent call last):\n"] + traceback.format_list(keep)
    out += traceback.format_exception_only(exc)
    return "".join(out).rstrip()


class Worker:
    def __init__(self, rfd: int, wfd: int, cfg: dict[str, Any]) -> None:
        self.reader = wire.Reader(rfd)
        self.wfd = wfd
        self.cfg = cfg
        self.entries: list[HistoryEntryView] = []
        self.transitions: list[TransitionView] = []
        self.last_anim: list[FrameView] = []
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.valid: list[str] = []
        self.notes: dict[str, Any] = {}
        self.ns: dict[str, Any] = {"__builtins__": namespace_builtins(), "__name__": "__main__"}
        self.armed = False
        self.pending = False
        self.ended = False  # the host ended this snippet (a guard): no more actions
        self.call = 0
        self.cur_ns = self.ns
        self.handlers: dict[int, Any] = {}  # the signal handlers as the worker set them (reset_hooks)

    def write(self, obj: dict[str, Any]) -> None:
        """One message to the host, stamped with the call it belongs to (the host refuses any
        other: issue 37)."""
        wire.send(self.wfd, obj | {"call": self.call})

    def send(self, obj: dict[str, Any]) -> None:
        """Send while deaf to the time-out signal: a message cut in half by KernelTimeout
        would corrupt the pipe. A time-out that arrives meanwhile is raised afterwards."""
        was, self.armed = self.armed, False
        try:
            self.write(obj)
        finally:
            self.armed = was
        if was and self.pending:
            self.pending = False
            raise KernelTimeout()

    # --- game state ------------------------------------------------------------------
    def apply(self, msg: dict[str, Any], blob: bytes) -> None:
        """Append new history entries (and their animation frames) sent by the host."""
        off = 0
        for e in msg.get("entries", []):
            h, w = e.get("shape", (64, 64))
            size = h * w
            frames = []
            for _ in range(e["n"]):
                frames.append(np.frombuffer(blob, np.int8, size, off).reshape(h, w))
                off += size
            view = FrameView(frames[-1], e["s"], e["l"])
            before = self.entries[-1].frame if self.entries else None
            self.entries.append(HistoryEntryView(e["a"], view))
            if e["a"]:
                if self.transitions:
                    self.transitions[-1].result = {}
                self.transitions.append(TransitionView(e["a"], before, view))
                self.last_anim = [view if i == len(frames) - 1 else FrameView(f, e["s"], e["l"])
                                  for i, f in enumerate(frames)]
                self.transitions[-1].frames = self.last_anim
        if "last_result" in msg:
            self.last_result = msg["last_result"]
        if "valid" in msg:
            self.valid = msg["valid"]
        if "notes" in msg:
            self.notes = msg["notes"]
        if self.transitions:
            self.transitions[-1].result = dict(self.last_result)

    def publish(self, ns: dict[str, Any]) -> None:
        last = self.transitions[-1] if self.transitions else None
        cur = self.entries[-1].frame if self.entries else None
        ns["current_frame"] = ns["latest_frame"] = cur
        ns["history"] = list(self.entries)
        ns["transitions"] = list(self.transitions)
        ns["last_transition"] = last
        ns["previous_frame"] = last.before_frame if last else None
        ns["last_action_frame"] = last.after_frame if last else None
        ns["last_action"] = last.action if last else None
        ns["valid_actions"] = list(self.valid)
        ns["last_action_result"] = dict(self.last_result)
        ns["action"] = self.action
        ns["last_animation"] = list(self.last_anim)
        if not isinstance(ns.get("notes"), dict):
            ns["notes"] = self.notes

    # --- requests the host answers with actions ----------------------------------------
    def action(self, actions: Any) -> dict[str, Any]:
        return self.request({"op": "action", "actions": normalize_actions(actions)})

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Ask the host for something it answers by playing (`action()`): the result comes back with the new boards as a delta and the game variables are
        refreshed (the host keeps its own record of the results for the tool message)."""
        if self.ended:
            raise StopSnippet()
        self.armed = False  # a time-out during the host's work is delivered afterwards
        try:
            self.write(msg)
            reply, blob = self.reader.recv()
        finally:
            self.armed = True
        self.apply(reply, blob)
        result = dict(reply.get("result") or {})
        if msg["op"] == "action" and result.get("executed") and self.last_anim:
            result["animation"] = summarize_animation(self.transitions[-1].before_frame, self.last_anim)
            self.last_result = dict(result)
            self.transitions[-1].result = dict(result)
        self.publish(self.cur_ns)
        if reply.get("error"):
            raise RuntimeError(reply["error"])
        if reply.get("end"):
            self.ended = True
            raise StopSnippet()
        if self.pending:
            self.pending = False
            raise KernelTimeout()
        return result

    # --- running a snippet -----------------------------------------------------------
    def run(self, msg: dict[str, Any]) -> None:
        reset_hooks(self.handlers)
        self.valid = list(msg.get("valid", self.valid))  # (a refused action's [] lasts only to its call's end)
        self.ended = self.pending = False
        self.publish(self.ns)
        self.ns["result"] = None
        cap = Capture(self.send, int(msg["head"]), int(msg["tail"]))
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = cap
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread's CPU time, user and system
        used = usage.ru_utime + usage.ru_stime
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (int(used + msg.get("timeout", 30) + 5), hard))
        except (ValueError, OSError):
            pass
        try:
            kind, error = self.execute(msg["code"], f"<cell-{self.call}>")
        finally:
            self.armed = False
            sys.stdout, sys.stderr = old
        # (the action results stay here: the host renders from its own record of them)
        done: dict[str, Any] = {"op": "done", "kind": kind and kind[:100], "error": error and error[:ERROR_CHARS],
                                "total": cap.total, "tail": cap.tailbuf}
        self.convert(done)
        reset_hooks(self.handlers)
        self.write(done)

    def execute(self, code: str, filename: str) -> tuple[str | None, str | None]:
        """Run the snippet in the namespace: (kind, error); kind None when it ended normally,
        else syntax, timeout, stopped (the host ended it) or the exception's class name."""
        try:
            compiled = compile(code, filename, "exec")
        except (SyntaxError, ValueError) as e:
            return "syntax", "".join(traceback.format_exception_only(e)).rstrip()
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # tracebacks show the source
        try:
            self.armed = True
            try:
                exec(compiled, self.ns)
            finally:
                self.armed = False
        except KernelTimeout as e:
            return "timeout", format_error(e)  # where the time ran out
        except StopSnippet:
            return "stopped", None
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too
            return type(e).__name__, format_error(e)
        return None, None

    def convert(self, done: dict[str, Any]) -> None:
        """`result` and `notes` into the done message. Converting them runs model code
        (__str__, __iter__): under the call's time limit too."""
        self.pending = False
        try:
            self.armed = True
            try:
                done["result"] = sized(json_safe(self.ns.get("result")), "result")
            except BaseException:  # noqa: BLE001 - a hostile __str__, a time-out
                done["result"] = "<result could not be converted>"
            notes = self.ns.get("notes")
            if isinstance(notes, dict):
                try:
                    text = json.dumps(json_safe(notes))
                    if len(text) <= int(self.cfg["notes_chars"]):
                        self.notes = json.loads(text)
                    else:
                        done["notes_error"] = f"notes too large ({len(text)} chars); not kept"
                except BaseException as e:  # noqa: BLE001
                    done["notes_error"] = f"notes not kept: {type(e).__name__}: {e}"[:500]
            done["notes"] = self.notes
        except KernelTimeout:
            done["result"] = "<result could not be converted in time>"
        finally:
            self.armed = False

    def on_interrupt(self, _signum: int, _frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise KernelTimeout()
        self.pending = True

    def loop(self, layers: dict[str, str]) -> None:
        self.write({"op": "ready", "pid": os.getpid(), "layers": layers})
        while True:
            msg, blob = self.reader.recv()
            op = msg.get("op")
            if op in ("sync", "run"):
                self.call = int(msg.get("call", self.call))
            if op == "sync":
                if msg.get("reset"):
                    self.entries, self.transitions, self.last_anim = [], [], []
                self.apply(msg, blob)
                self.write({"op": "synced", "n": len(self.entries)})
            elif op == "run":
                self.run(msg)
            elif op == "exit":
                return


def main(argv: list[str]) -> None:
    """`python -m duck.sandbox.worker RFD WFD`: its config first, then confined
    (duck.sandbox.probe.begin), then the calls."""
    sys.dont_write_bytecode = True
    _, wfd, cfg, layers = begin(argv, "the kernel worker")
    sys.setrecursionlimit(RECURSION_LIMIT)
    worker = Worker(int(argv[0]), wfd, cfg)
    signal.signal(signal.SIGUSR1, worker.on_interrupt)
    signal.signal(signal.SIGINT, worker.on_interrupt)
    worker.handlers = handlers()
    try:
        worker.loop(layers)
    except wire.WireError:
        pass

if __name__ == "__main__":
    main(sys.argv[1:])
