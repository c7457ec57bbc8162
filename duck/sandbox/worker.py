"""The kernel's worker process: the game's variables, and one process per call (worker side).

Started by `duck.sandbox.host.Kernel` (through duck.sandbox.process) as `python -s -m
duck.sandbox.worker RFD WFD` in a session of its own, a temporary working directory and a
scrubbed environment; its config is the first message on the pipe. Before it reads anything
else it confines itself (duck.sandbox.wall.confine) and reports the layers in its `ready`.

It never runs model code (issue 48: code left by one call acted in the next). It keeps the game
variables (frames, history, transitions: duck.sandbox.views), receiving only *new* observations
from the host, so an `action()` costs the same at step 1,000 as at step 10; for each `run` it
forks the call's process (duck.sandbox.call), tells the host its pid before that process may
run anything, keeps the namespace the call leaves (bytes it never parses: duck.sandbox.carry)
and reaps it. Every message carries the id of the call it belongs to (the host refuses any
other). `action()` sends a request and waits for the result and the new boards (`request`).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

import numpy as np

from duck.game.animation import summarize_animation
from duck.sandbox import call, carry, wire
from duck.sandbox.guard import Guard
from duck.sandbox.probe import begin
from duck.sandbox.views import FrameView, HistoryEntryView, TransitionView, normalize_actions
from duck.sandbox.wall.confine import prctl

PR_SET_DUMPABLE = 4

RECURSION_LIMIT = 10_000


class Worker:
    def __init__(self, reader: wire.Reader, wfd: int, cfg: dict[str, Any], guard: Guard,
                 seccomp: bool) -> None:
        self.reader, self.wfd, self.cfg, self.guard, self.seccomp = reader, wfd, cfg, guard, seccomp
        self.entries: list[HistoryEntryView] = []
        self.transitions: list[TransitionView] = []
        self.last_anim: list[FrameView] = []
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.valid: list[str] = []
        self.notes: dict[str, Any] = {}
        self.saved = b""  # the namespace the last call left (duck.sandbox.carry): only the next call parses it
        self.ns: dict[str, Any] = {}  # the call's namespace (in the call's process)
        self.armed = False
        self.pending = False
        self.ended = False  # the host ended this snippet (a guard): no more actions
        self.call = 0

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
            raise call.KernelTimeout()

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
        """Ask the host for something it answers by playing (`action()`): the result comes back with
        the new boards as a delta and the game variables are refreshed (the host keeps its own
        record of the results for the tool message)."""
        if self.ended:
            raise call.StopSnippet()
        self.armed = False  # a time-out during the host's work is delivered afterwards
        try:
            self.write(msg)
            reply, blob = self.reader.recv()
        finally:
            self.armed = True
        self.apply(reply, blob)
        result = dict(reply.get("result") or {})
        if msg["op"] == "action" and result.get("executed"):
            result = self.summarized(result)
        self.publish(self.ns)
        if reply.get("error"):
            raise RuntimeError(reply["error"])
        if reply.get("end"):
            self.ended = True
            raise call.StopSnippet()
        if self.pending:
            self.pending = False
            raise call.KernelTimeout()
        return result

    def on_interrupt(self, _signum: int, _frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise call.KernelTimeout()
        self.pending = True

    def summarized(self, result: dict[str, Any]) -> dict[str, Any]:
        """`result` (the last action's) with the summary of its animation, kept as `last_action_result`."""
        if self.last_anim and self.transitions:
            result["animation"] = summarize_animation(self.transitions[-1].before_frame, self.last_anim)
            self.last_result = dict(result)
            self.transitions[-1].result = dict(result)
        return result

    # --- the game views, by their place (duck.sandbox.carry carries them so) ------------------
    def view(self, spec: list[Any]) -> Any:
        """The view `spec` names: ["h", i] an entry, ["hf", i] its frame, ["hg", i] that frame's
        grid, ["tr", i] a transition, ["tf", i, k] its k-th frame; None if there is none."""
        kind, *at = spec if spec else [None]
        try:
            if not all(type(i) is int and i >= 0 for i in at):
                return None
            if kind in ("h", "hf", "hg") and len(at) == 1:
                e = self.entries[at[0]]
                return e if kind == "h" else e.frame if kind == "hf" else e.frame.grid
            if kind == "tr" and len(at) == 1:
                return self.transitions[at[0]]
            if kind == "tf" and len(at) == 2:
                return self.transitions[at[0]].frames[at[1]]
        except IndexError:
            return None
        return None

    def view_ids(self) -> dict[int, list[Any]]:
        """id -> spec of every game view (the call's process asks once, when it carries one)."""
        out: dict[int, list[Any]] = {}
        for i, t in enumerate(self.transitions):
            out[id(t)] = ["tr", i]
            out.update((id(f), ["tf", i, k]) for k, f in enumerate(t.frames))
        for i, e in enumerate(self.entries):
            out[id(e)], out[id(e.frame)], out[id(e.frame.grid)] = ["h", i], ["hf", i], ["hg", i]
        return out

    # --- the calls ---------------------------------------------------------------------------
    def fork(self, msg: dict[str, Any]) -> None:
        """One call: its own process (duck.sandbox.call), which runs nothing until the host has
        its pid and says go; then the namespace it leaves is read (`carry.complete` checks only
        its framing), it is reaped and the host told how it ended."""
        gate_r, gate_w = os.pipe()
        keep_r, keep_w = os.pipe()
        self.guard.forking = True
        prctl(PR_SET_DUMPABLE, 1)  # born dumpable: the host reads its /proc/<pid>/fd as its uid at once
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                self.guard.forking = False
                os.close(gate_w)
                os.close(keep_r)
                if os.read(gate_r, 2) != b"go":  # until the host holds this pid
                    return
                os.close(gate_r)
                call.run(self, msg, keep_w)
                status = 0
            except BaseException:  # noqa: BLE001 - on its stderr (a pipe the host reads), then gone
                traceback.print_exc(file=sys.__stderr__)
            finally:
                os._exit(status)
        self.guard.forking = False
        prctl(PR_SET_DUMPABLE, 0)  # and this process not (no call's process may open its memory)
        os.close(gate_r)
        os.close(keep_w)
        self.write({"op": "forked", "pid": pid})
        try:
            go = self.reader.recv()  # the host holds a pidfd of it now: its pid cannot be reused meanwhile
            if go is not None and go[0].get("op") == "go":
                os.write(gate_w, b"go")
        finally:
            os.close(gate_w)  # (without its "go", the call's process ends at once)
        parts, n, cap = [], 0, call.CARRY_MB << 20
        while chunk := os.read(keep_r, 1 << 20):
            n += len(chunk)
            if n <= cap + 4096:
                parts.append(chunk)
        os.close(keep_r)
        _, status = os.waitpid(pid, 0)
        data = b"".join(parts)
        self.saved = data if carry.complete(data) else b""
        self.write({"op": "ended", "status": status})  # it is dead: nothing of it follows

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
                last = self.last_result  # the last call's last result, if its action is the last entry
                if last.get("executed") and self.entries and \
                        last.get("action_num") == self.entries[-1].frame.step:
                    self.summarized(dict(last))
                self.write({"op": "synced", "n": len(self.entries)})
            elif op == "run":
                self.fork(msg)
            elif op == "exit":
                return


def main(argv: list[str]) -> None:
    """`python -m duck.sandbox.worker RFD WFD`: its config first, then confined
    (duck.sandbox.probe.begin), then the calls."""
    sys.dont_write_bytecode = True
    reader, wfd, cfg, layers, guard = begin(argv, "the kernel worker")
    sys.setrecursionlimit(RECURSION_LIMIT)
    worker = Worker(reader, wfd, cfg, guard, layers.get("seccomp", "").startswith("on"))
    signal.signal(signal.SIGUSR1, worker.on_interrupt)
    signal.signal(signal.SIGINT, worker.on_interrupt)
    try:
        worker.loop(layers)
    except wire.WireError:
        pass

if __name__ == "__main__":  # run under its own name: the model's classes are the only ones of `__main__`
    from duck.sandbox.worker import main as worker_main
    worker_main(sys.argv[1:])
