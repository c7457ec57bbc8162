"""The kernel's worker process: runs model code in a persistent namespace.

Started by `duck.sandbox.host.Kernel` (through duck.sandbox.process) as `python -s -m
duck.sandbox.worker RFD WFD` in a session of its own, a temporary working directory and a
scrubbed environment; its config is the first message on the pipe. It keeps
the game variables (frames, history, transitions, ...) as Python objects and receives only
*new* observations from the host, so an `action()` call costs the same at step 1,000 as at
step 10. The host owns the game: `action()` sends the requested actions over the pipe and
waits for the result and the new boards.

Before it reads anything from the host it confines itself (duck.sandbox.confine: namespaces,
Landlock, hard limits, its own uid, seccomp) and reports the layers in its `ready` message.
The in-process fences (audit hook, imports: `duck.sandbox.guard`) only give clear messages.
At the call's time
limit the host sends SIGUSR1, which raises `KernelTimeout` in the snippet (the namespace
survives); the host kills the process group if the snippet swallows it or is stuck in C code.

The dialect (builtins and imports, fresh or persistent namespace, our additions
`last_animation` and `notes`, traceback formats: `duck.sandbox.dialect`) is named in
its config and fixed for the process's life.
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
from typing import Any

import numpy as np

from duck.game.animation import summarize_animation
from duck.game.frames import Frame
from duck.sandbox import wire
from duck.sandbox.dialect import DIALECTS
from duck.sandbox.confine import confine
from duck.sandbox.guard import GUARD, Guard
from duck.sandbox.tools import Tools


class KernelTimeout(BaseException):
    """Raised inside the snippet when its time limit is reached."""


class StopSnippet(BaseException):
    """Raised by action() when the host ends the snippet (the call's gate said so)."""


class FrameView(Frame):
    """The Duck's frame class name shows in error messages; keep it."""


class HistoryEntryView:
    def __init__(self, action: str, frame: FrameView) -> None:
        self.action = action
        self.frame = frame

    def __str__(self) -> str:
        return f"AsciiHistoryEntryView(action={self.action!r}, frame={self.frame})"

    __repr__ = __str__


class TransitionView:
    def __init__(self, action: str, before_frame: FrameView | None, after_frame: FrameView) -> None:
        self.action = action
        self.before_frame = before_frame
        self.after_frame = after_frame
        self.frame = after_frame
        self.frames = [after_frame]  # every frame the action returned (ours: its animation)
        self.result: dict[str, Any] = {}

    def __str__(self) -> str:
        return (f"ActionTransitionView(action={self.action!r}, before_frame={self.before_frame}, "
                f"after_frame={self.after_frame})")

    __repr__ = __str__


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


def sized(value: Any, what: str) -> Any:
    """`value` if its JSON fits in MAX_RESULT_CHARS, else a short note saying so."""
    n = len(json.dumps(value))
    return value if n <= MAX_RESULT_CHARS else f"<{what} of {n} characters: too large to send; print a part of it>"


class Worker:
    def __init__(self, rfd: int, wfd: int, cfg: dict[str, Any]) -> None:
        self.reader = wire.Reader(rfd)
        self.wfd = wfd
        self.cfg = cfg
        self.dialect = DIALECTS[cfg["dialect"]]
        self.entries: list[HistoryEntryView] = []
        self.transitions: list[TransitionView] = []
        self.last_anim: list[FrameView] = []
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.valid: list[str] = []
        self.notes: dict[str, Any] = {}
        self.ns: dict[str, Any] = {}
        self.armed = False
        self.pending = False
        self.ended = False  # the host ended this snippet (its gate): no more actions
        self.results: list[dict[str, Any]] = []
        self.call = 0
        self.cur_ns: dict[str, Any] = {}
        # The world-model tools (duck.sandbox.tools), when the kernel was started with them.
        self.tools = Tools(self) if cfg.get("tools") and self.dialect.additions else None

    def send(self, obj: dict[str, Any]) -> None:
        """Send while deaf to the time-out signal: a message cut in half by KernelTimeout
        would corrupt the pipe. A time-out that arrives meanwhile is raised afterwards."""
        was, self.armed = self.armed, False
        try:
            wire.send(self.wfd, obj)
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
        if self.dialect.additions:
            ns["last_animation"] = list(self.last_anim)
            if not isinstance(ns.get("notes"), dict):
                ns["notes"] = self.notes
        if self.tools is not None:
            self.tools.publish(ns)

    # --- action() --------------------------------------------------------------------
    def action(self, actions: Any) -> dict[str, Any]:
        items = normalize_actions(actions)
        if self.ended:
            raise StopSnippet()
        self.armed = False  # a time-out during the host's work is delivered afterwards
        try:
            wire.send(self.wfd, {"op": "action", "actions": items})
            got = self.reader.recv()
        finally:
            self.armed = True
        msg, blob = got
        self.apply(msg, blob)
        result = dict(msg.get("result") or {})
        if self.dialect.additions and result.get("executed") and self.last_anim:
            result["animation"] = summarize_animation(self.transitions[-1].before_frame, self.last_anim)
            self.last_result = dict(result)
            self.transitions[-1].result = dict(result)
        if result:
            self.results.append(result)
        self.publish(self.cur_ns)
        if msg.get("error"):
            raise RuntimeError(msg["error"])
        if msg.get("end"):
            self.ended = True
            raise StopSnippet()
        if self.pending:
            self.pending = False
            raise KernelTimeout()
        return result

    def host_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """A request to the host other than action() (the tools' `explore`), answered like an
        action: the host may play actions, whose boards come back as a delta."""
        if self.ended:
            raise StopSnippet()
        self.armed = False  # as in action(): a time-out during the host's work comes afterwards
        try:
            wire.send(self.wfd, request)
            msg, blob = self.reader.recv()
        finally:
            self.armed = True
        self.apply(msg, blob)
        result = dict(msg.get("result") or {})
        if result.get("executed"):
            self.results.append(result)
        self.publish(self.cur_ns)
        if msg.get("error"):
            raise RuntimeError(msg["error"])
        if self.pending:
            self.pending = False
            raise KernelTimeout()
        return result

    # --- running a snippet -----------------------------------------------------------
    def namespace(self) -> dict[str, Any]:
        """The persistent namespace, or in a dialect without one a new one per call."""
        if self.dialect.fresh_namespace or not self.ns:
            ns = {"__builtins__": self.dialect.builtins(), "__name__": "__main__"}
            if not self.dialect.fresh_namespace:
                self.ns = ns
            return ns
        return self.ns

    def run(self, msg: dict[str, Any]) -> None:
        self.call = int(msg.get("call", self.call + 1))
        self.ended = self.pending = False
        self.results = []
        ns = self.cur_ns = self.namespace()
        self.publish(ns)
        ns["result"] = None
        cap = Capture(self.send, int(msg["head"]), int(msg["tail"]))
        old = sys.stdout, sys.stderr
        sys.stdout = cap
        sys.stderr = cap if self.dialect.stderr_shown else io.StringIO()
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread's CPU time, user and system
        used = usage.ru_utime + usage.ru_stime
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (int(used + msg.get("timeout", 30) + 5), hard))
        except (ValueError, OSError):
            pass
        filename = self.dialect.cell_filename(self.call)
        error = kind = None
        code = msg["code"]
        try:
            try:
                compiled = compile(code, filename, "exec")
            except (SyntaxError, ValueError) as e:
                kind = "syntax"
                error = self.dialect.syntax_error(e)
            else:
                # Our dialect's tracebacks show the snippet's source lines.
                linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
                self.armed = True
                try:
                    exec(compiled, ns)
                finally:
                    self.armed = False
        except KernelTimeout as e:
            kind = "timeout"
            error = self.dialect.format_error(e, filename)  # where the time ran out
        except StopSnippet:
            kind = "stopped"
        except BaseException as e:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too
            kind = type(e).__name__
            error = self.dialect.format_error(e, filename)
        finally:
            self.armed = False
            sys.stdout, sys.stderr = old
        done: dict[str, Any] = {"op": "done", "kind": kind, "error": error,
                                "results": sized(json_safe(self.results[-200:]), "results"),
                                "total": cap.total, "tail": cap.tailbuf, "last_result": self.last_result}
        if not isinstance(done["results"], list):
            done["results"] = []
        # Converting `result` and `notes` runs model code (__str__, __iter__): under the
        # call's time limit too.
        self.pending = False
        try:
            self.armed = True
            try:
                done["result"] = sized(json_safe(ns.get("result")), "result")
            except BaseException:  # noqa: BLE001 - a hostile __str__, a time-out
                done["result"] = "<result could not be converted>"
            if self.dialect.additions:
                notes = ns.get("notes")
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
        wire.send(self.wfd, done)

    def on_interrupt(self, _signum: int, _frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise KernelTimeout()
        self.pending = True

    def loop(self, layers: dict[str, str]) -> None:
        wire.send(self.wfd, {"op": "ready", "pid": os.getpid(), "layers": layers})
        while True:
            msg, blob = self.reader.recv()
            op = msg.get("op")
            if op == "sync":
                if msg.get("reset"):
                    self.entries, self.transitions, self.last_anim = [], [], []
                self.apply(msg, blob)
                wire.send(self.wfd, {"op": "synced", "n": len(self.entries)})
            elif op == "run":
                self.run(msg)
            elif op == "exit":
                return


def normalize_actions(actions: Any) -> list[dict[str, Any]]:
    """The Duck's client-side checks, with its exact messages."""
    if isinstance(actions, (str, dict)):
        items = [actions]
    elif isinstance(actions, (list, tuple)):
        items = list(actions)
    else:
        raise TypeError("action(actions) expects a string, an action object, or a list of "
                        "action strings/objects.")
    if not items:
        raise ValueError("action(actions) requires at least one action.")
    out = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, str):
            name = item.strip()
            if not name:
                raise ValueError(f"Action {i} is empty.")
            out.append({"action": name})
        elif isinstance(item, dict):
            name = str(item.get("action", "")).strip()
            if not name:
                raise ValueError(f"Action {i} is missing an `action` field.")
            if name.upper() == "MOUSE" and ("x" in item or "y" in item):
                raise ValueError(f"Action {i} uses legacy MOUSE x/y fields; use row and col.")
            entry = {"action": name}
            for key in ("row", "col"):
                if key in item:
                    v = item[key]
                    entry[key] = v if isinstance(v, (int, float, str)) or v is None else str(v)
            out.append(entry)
        else:
            raise TypeError(f"Action {i} must be a string or a dict.")
    return out


def main(argv: list[str]) -> None:
    """`python -m duck.sandbox.worker RFD WFD`: the plan comes as the first message on RFD (a
    command line is readable by every process on the machine; the plan names the games'
    and the records' folders)."""
    rfd, wfd = int(argv[0]), int(argv[1])
    sys.dont_write_bytecode = True
    first = wire.Reader(rfd).recv()
    if first is None or first[0].get("op") != "config":
        raise SystemExit("the kernel worker expected its config first")
    cfg = first[0]["cfg"]
    layers = confine(cfg["plan"])
    sys.setrecursionlimit(DIALECTS[cfg["dialect"]].recursion_limit)
    worker = Worker(rfd, wfd, cfg)
    signal.signal(signal.SIGUSR1, worker.on_interrupt)
    signal.signal(signal.SIGINT, worker.on_interrupt)
    sys.addaudithook(Guard(os.getcwd(), cfg.get("deny_read", [])))
    layers["guard"] = GUARD
    try:
        worker.loop(layers)
    except wire.WireError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
