"""The sandbox's host side: the Kernel, one worker per game and one process per call (DESIGN §3).

`Kernel(session)` starts `duck.sandbox.worker` and keeps it in step with the game, sending each
new observation once, as a delta (duck.sandbox.state). `kernel.run(code)` runs one snippet in a
process the worker forks for it (duck.sandbox.call) and returns a `CallResult`: what happened,
as data; `.text` is the tool message the model receives (duck.sandbox.render). Every message is
checked and cut to size (duck.sandbox.trust) in one loop (`_exchange`), which answers the
call's action requests, watches the clock (SIGUSR1 at the limit, a kill after the grace) and the
disk quota. An action belongs to the call that played it (issue 48): nothing is taken before
the worker names the call's process, nothing after its `done`, and that process is killed at
its `done`, so no code of one call runs in the next. A crash, a hang or a protocol violation
costs a fresh worker (game variables and notes restored). Threat model: docs/sandbox.md.
Use: `k = Kernel(session); k.run(code) -> CallResult; k.act(action)`; `k.notes`; `k.close()`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from duck.config import KernelConfig
from duck.game.actions import Action, display
from duck.game.source import Observation
from duck.play.session import Session
from duck.sandbox import render, trust, wire
from duck.sandbox.actions import ActionHost, CallActions
from duck.sandbox.batch_guards import Guards
from duck.sandbox.lifecycle import WRITE_DEADLINE_S, WorkerProcess
from duck.sandbox.state import GameState

# The kernel's `notes` dict, as JSON, is kept up to this size (kernel.notes_dict_chars before
# issue 40: run.json's RETIRED keeps the value).
NOTES_CHARS = 16_000
EMPTY = "python requires a non-empty `code` string."

# ok; error (an exception); syntax; timeout (the call's limit); stopped (a guard ended it);
# crash (the worker died: restarted); empty (no code).
CallKind = Literal["ok", "error", "syntax", "timeout", "stopped", "crash", "empty"]


@dataclass
class CallResult:
    """One snippet's outcome, as data; `text` is the tool message the model receives."""

    kind: CallKind
    stdout: str = ""
    error: str | None = None
    result: Any = None
    action_results: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    restarted: bool = False
    wall_ms: float = 0.0
    stdout_total: int = 0
    error_kind: str | None = None
    notice: str | None = None  # what the host did about the worker (ended a thread, a process)
    steps: list[Any] = field(default_factory=list)  # duck.game.change.Step per action played (its frames)
    notes_error: str | None = None  # why the `notes` dict was not kept
    died: bool = False  # the worker had died since the previous call
    timeout_s: float = 0.0  # the call's limit

    @property
    def text(self) -> str:
        return render.tool_text(self)


@dataclass
class Call:
    """One snippet on its way through the worker: its output as it arrives, its actions."""

    head: int  # characters of printed output kept from its start
    tail: int  # and from its end
    deadline: float
    grace_s: float
    actions: CallActions = field(default_factory=CallActions)

    def __post_init__(self) -> None:
        self.actions.deadline = self.deadline
    out: list[str] = field(default_factory=list)
    kept: int = 0  # characters in `out`
    tail_text: str = ""
    total: int = 0
    interrupted_at: float | None = None

    def limit(self) -> float:
        """Until when the worker may take: the call's limit, then the grace after SIGUSR1."""
        return self.deadline if self.interrupted_at is None else self.interrupted_at + self.grace_s

    def output(self, msg: dict[str, Any]) -> None:
        if msg["op"] == "out":  # the head's room is for the whole call, never per message
            if self.kept < self.head:
                self.out.append(trust.text(msg["text"][:self.head - self.kept]))
                self.kept += len(self.out[-1])
        else:
            self.tail_text, self.total = trust.text(msg["text"], self.tail), msg["total"]

    def stdout(self, tail_text: str, total: int) -> str:
        """Head and tail of the `total` characters printed, with a note of what was cut."""
        head_text = "".join(self.out)
        if total <= len(head_text) + len(tail_text) or self.tail == 0:
            return head_text + tail_text
        return f"{head_text}\n... [{total - len(head_text) - len(tail_text)} chars cut] ...\n{tail_text}"


class Kernel(WorkerProcess):
    def __init__(self, session: Session, config: KernelConfig | None = None, *,
                 deny_read: list[str] | tuple[str, ...] = ()) -> None:
        # Model code may not read the games' files (their source holds the rules and solutions).
        own = [session.game.files_dir] if session.game.files_dir else []
        self.deny_read = [*own, *(str(p) for p in deny_read)]
        # Hidden from the worker where a mount namespace allows, closed by file modes (and
        # verified) where not: the games and the run's folder (run.json names the games; the
        # records and the conversations, which file modes close where nothing hides them).
        records = Path(session.writer.path).resolve().parent
        super().__init__(config or KernelConfig(), [*self.deny_read, str(records.parent), str(records),
                                                    str(records.parent / "conversations")], session.event)
        self.session = session
        self.host = ActionHost(session)
        self.state = GameState(self.host.names())
        self.calls = 0
        self.append("", session.obs)

    @property
    def notes(self) -> dict[str, Any]:
        """The model's `notes` dict as the worker last returned it (kept across restarts)."""
        return self.state.notes

    def append(self, text: str, obs: Observation) -> None:
        """A history entry for the board the game shows now (`text`: the action that led to it)."""
        self.state.append(text, obs, self.session.game.actions, self.host.level_number())

    def install_guards(self, guards: Guards) -> bool:
        """Put the batch guards (duck.sandbox.batch_guards) on the action host; True when they are on."""
        self.host.guards = guards if guards.active else None
        return self.host.guards is not None

    def act(self, action: Action, info: dict[str, Any] | None = None) -> Observation:
        """An action taken by the host itself (the RESET after GAME_OVER, or a policy acting
        outside the kernel). The worker hears of it on the next call."""
        n = self.session.game.actions
        obs = self.session.step(action, info)
        if self.session.game.actions > n:
            self.append(display(action), obs)
        self.state.valid = self.host.names()
        return obs

    def worker_config(self) -> dict[str, Any]:
        return {"deny_read": self.deny_read, "notes_chars": NOTES_CHARS}

    def start(self) -> None:
        super().start()
        self.state.synced = 0
        self._sync(reset=True)

    def _sync(self, reset: bool = False) -> None:
        msg, blob = self.state.delta()
        self.send(msg | {"op": "sync", "reset": reset, "notes": self.state.notes, "call": self.calls}, blob)
        got = self.recv(time.monotonic() + 30)
        if got is None:
            raise wire.WireError("the kernel worker did not take the state")
        trust.check(got[0], ("synced",), self.calls)
        self.state.sent()
        self.state.settled()

    # --- running code ----------------------------------------------------------------
    def run(self, code: str, *, timeout_s: float | None = None,
            info: dict[str, Any] | None = None) -> CallResult:
        """Run one snippet; `info` goes into the record with each action it plays."""
        self.started()
        t0 = time.monotonic()
        timeout = self.cfg.call_timeout_s if timeout_s is None else timeout_s
        if self.session.deadline is not None:  # never run past the game's own deadline
            timeout = max(1.0, min(timeout, self.session.deadline - t0))
        self.calls += 1
        code = code.rstrip()
        if not code:
            return CallResult("empty", error=EMPTY, timeout_s=timeout)
        died = self.proc is not None and self.proc.poll() is not None
        if self.proc is None or died:
            self.restart() if died else self.start()
        junk = None if died else self._between()
        head = render.OUTPUT_CHARS // 2
        call = Call(head, render.OUTPUT_CHARS - head, t0 + timeout, self.cfg.grace_s)
        done, crash = self._exchange(code, call, timeout, info)
        res = self._crashed(call, crash) if done is None else self._finished(call, done)
        if died and not res.restarted:
            res.restarted = True
            res.error_kind = res.error_kind or "died between calls"
        if junk:
            res.restarted, res.notice = True, "; ".join(n for n in (junk, res.notice) if n)
        res.steps, res.died, res.timeout_s = call.actions.steps, died, timeout
        res.wall_ms = (time.monotonic() - t0) * 1000
        return res

    def _between(self) -> str | None:
        """Before a call: nothing may have been written on the worker's pipe since the last (the
        worker writes only when asked; a call's process is dead by its end). Else a restart,
        recorded, and what the model is told."""
        if self.worker is None or not self.worker.reader.pending():
            return None
        why = "wrote to its pipe between calls"
        self.session.event("error", f"the kernel worker {why}: restarted")
        self.restart()
        return (f"the kernel {why}: it was restarted, your functions and variables are gone "
                "(game variables and notes are restored)")

    def _exchange(self, code: str, call: Call, timeout: float,
                  info: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
        """The call: send the worker the state it lacks and the snippet, learn the pid of the
        process it forks for it, then that process's messages (`_messages`). Returns (the done
        message, "") or (None, why the worker must be killed)."""
        try:
            self._sync()  # (every call: the last call's process told it nothing; 0.05 ms)
            worker_has = self.state.synced
            try:
                self.send({"op": "run", "code": code, "call": self.calls, "head": call.head,
                           "tail": call.tail, "timeout": timeout, "valid": self.state.valid})
                got = self.recv(call.limit())  # the worker names the call's process before it runs anything
                if got is None:
                    return None, "hung"
                self.begin_call(trust.check(got[0], ("forked",), self.calls)["pid"])
                self.send({"op": "go", "call": self.calls})
                return self._messages(call, info)
            finally:
                self.state.synced = worker_has  # what the call's process was told, the worker was not
        except (wire.PipeClosed, OSError) as e:
            return None, f"{e}"
        except wire.WireError as e:  # a message the protocol does not allow (trust.Misbehaved too)
            return None, f"protocol violation: {e}"

    def _messages(self, call: Call, info: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
        """The call's process's messages until its `done` (then it is killed, and nothing may
        follow), each checked; its action requests answered; the clock and the quota watched."""
        while True:
            limit = call.limit()
            got = self.recv(limit)
            if got is None:
                if time.monotonic() < limit:
                    continue
                if call.interrupted_at is not None:
                    return None, "hung"
                call.interrupted_at = time.monotonic()
                self.signal_call(signal.SIGUSR1)
                continue
            msg = trust.check(got[0], ("out", "tail", "action", "done", "ended"), self.calls)
            if msg["op"] == "ended":  # the worker says the call's process died before its done
                return None, f"exit {os.waitstatus_to_exitcode(msg['status'])}"
            if msg["op"] == "done":
                self.end_call()
                got = self.recv(time.monotonic() + WRITE_DEADLINE_S)  # the worker has reaped it
                if got is None or got[0].get("op") != "ended":
                    return None, "protocol violation: a message after its done"
                trust.check(got[0], ("ended",), self.calls)
                return msg, ""
            if msg["op"] in ("out", "tail"):
                call.output(msg)
            else:
                self._answer(msg, call, info)

    def _crashed(self, call: Call, crash: str) -> CallResult:
        """The worker hung, died or misbehaved: a fresh one, and what the call printed."""
        self.end_call()  # (and the quota's clock stopped: it says whether it killed the call's process)
        crash = self.quota_hit or crash
        try:
            status = self.proc.wait(timeout=0.2) if self.proc else None
        except subprocess.TimeoutExpired:
            status = None
        self.kill()
        self.start()
        kind = "timeout" if crash == "hung" or call.interrupted_at is not None else "crash"
        error_kind = ("hung" if crash == "hung" else
                      crash if crash.startswith(("protocol", "its temp", "exit ")) else f"exit {status}")
        res = CallResult(kind, restarted=True, actions=list(call.actions.executed), error_kind=error_kind)
        res.stdout = call.stdout(call.tail_text, call.total)
        res.stdout_total = call.total or len(res.stdout)
        return res

    def _finished(self, call: Call, done: dict[str, Any]) -> CallResult:
        """The worker's `done`: the call's outcome, its notes and result, then what it left."""
        ended = done.get("kind")  # None, syntax, timeout, stopped, or the exception's class
        kind: CallKind = ("stopped" if ended == "stopped" else
                          "timeout" if call.interrupted_at is not None or ended == "timeout" else
                          "syntax" if ended == "syntax" else "error" if done.get("error") else "ok")
        results = list(call.actions.results)  # the host's own record, never the worker's copy
        res = CallResult(kind, error=trust.text(done["error"]) if done.get("error") else None,
                         result=trust.clean(done.get("result")), action_results=results,
                         actions=list(call.actions.executed),
                         error_kind=trust.text(ended, 100) if ended is not None else None,
                         notes_error=trust.text(done["notes_error"], 500) if done.get("notes_error")
                         else None)
        res.stdout = call.stdout(trust.text(done["tail"], call.tail), done["total"])
        res.stdout_total = done["total"]
        notes = done.get("notes")
        if isinstance(notes, dict):
            notes = trust.clean(notes)
            if len(json.dumps(notes)) <= NOTES_CHARS:
                self.state.notes = notes
        left = self.end_leftovers()
        said = [left] if left else []
        if done.get("restored"):
            said.append(trust.text(done["restored"], 300) + ": this call started without them")
        lost = [trust.text(x, 200) for x in (done.get("dropped") or [])[:50] if isinstance(x, str)]
        if lost:
            said.append("these variables cannot be kept between calls and are gone: " + "; ".join(lost))
        if not res.restarted and self.over_quota():
            self.restart()
            res.restarted = True
            said = [f"the kernel's {self.quota_message().removeprefix('its ')}: the kernel was restarted, "
                    "your functions, variables and files are gone"]
        res.notice = "; ".join(said) or None
        return res

    def _answer(self, msg: dict[str, Any], call: Call, info: dict[str, Any] | None) -> None:
        """Answer a request of the worker's, an `action()` batch: the new boards go back as a delta."""
        error, end = None, False
        if time.monotonic() >= call.deadline:  # past the call's limit nothing more is played (issue 37)
            result = self.host.terminal_result(len(msg.get("actions") or []))
        else:
            try:
                # (the request checked by trust.check)
                result, done, end = self.host.run_batch(msg["actions"], call.actions, info)
            except Exception as e:  # noqa: BLE001 - the game or our code failed: tell the snippet
                result, done, error = {}, [], "action failed in sandbox host."
                self.session.event("error", f"kernel action failed: {type(e).__name__}: {e}",
                                   traceback.format_exc(limit=6))
            for text, obs, step, level in done:
                self.state.append(text, obs, step, level)
            if result:
                self.state.last_result = result
                self.state.valid = self.host.names()
        if result and (result.get("executed") or msg["op"] == "action"):  # what the tool message reports
            call.actions.results.append(result)
        reply, blob = self.state.delta()
        if result.get("stop_reason", "").startswith("previous_"):
            reply["valid"] = []
        self.send(reply | {"op": f"{msg['op']}_reply", "result": result, "end": end, "error": error}, blob,
                  deadline=call.limit() + call.grace_s)
        self.state.sent()
