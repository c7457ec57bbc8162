"""The sandbox: one persistent Python worker process per game (DESIGN §3).

`Kernel(session)` starts `duck.sandbox.worker` and keeps it in step with the game: every new
observation goes to the worker once, as a delta, so an `action()` call costs the same at
step 1,000 as at step 10 (the Duck rebuilt the whole history in a fresh interpreter on
every call: 27 s per action after 150 actions). `kernel.run(code)` runs one model snippet
and returns a `CallResult` whose `.message` is the tool message for the model, in the
Duck's shape ("What the model receives" in ../shared/duck-traces/README.md).

Time-outs: at the call's limit the worker gets SIGUSR1, which raises `KernelTimeout` in the
snippet and keeps the namespace; if the snippet swallows it or hangs in C code, the process
group is killed after a grace period, a fresh worker is started, the game variables are
restored from the host's copy, and the message tells the model its definitions were lost.
Crashes (os._exit, a segfault, a closed pipe) are handled the same way. Printed output is
kept even then (head streamed as written, tail synced every 0.25 s).

The dialect (`duck.sandbox.dialect`) is chosen once per kernel: `OURS` (the default, what our
agent plays with) or `DUCK` (the old agent's sandbox, for replaying its recorded code). The
fences and why: `duck.sandbox.guard`.

Use: `k = Kernel(session); k.run(code) -> CallResult; k.act(action)` for actions the host
takes itself; `k.notes`; `k.close()`. The worker starts on the first call. `run(code,
gate=...)` lets a caller check each action of that call (the trace replay's recorded caps).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from duck.config import KernelConfig
from duck.game.actions import Action, display
from duck.game.source import Observation
from duck.play.session import Session
from duck.sandbox import wire
from duck.sandbox.actions import ActionHost, CallActions, Gate
from duck.sandbox.dialect import OURS, Dialect

# Where the `duck` package is imported from, for the worker's PYTHONPATH.
_IMPORT_ROOT = Path(__file__).resolve().parents[2]


# ok; error (an exception); syntax; timeout (the call's limit); stopped (its gate ended it);
# crash (the worker died: restarted); empty (no code).
CallKind = Literal["ok", "error", "syntax", "timeout", "stopped", "crash", "empty"]


@dataclass
class CallResult:
    """One snippet's outcome. `message` is what the model receives; `text` its JSON."""

    kind: CallKind
    stdout: str = ""
    error: str | None = None
    result: Any = None
    action_results: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    restarted: bool = False
    message: dict[str, Any] = field(default_factory=dict)
    wall_ms: float = 0.0
    stdout_total: int = 0
    error_kind: str | None = None

    @property
    def text(self) -> str:
        return json.dumps(self.message, indent=2)


class Kernel:
    def __init__(self, session: Session, config: KernelConfig | None = None, *, dialect: Dialect = OURS,
                 time_limit_s: float | None = None, deny_read: list[str] | tuple[str, ...] = ()) -> None:
        self.session = session
        self.cfg = config or KernelConfig()
        self.dialect = dialect
        self.host = ActionHost(session, dialect, time_limit_s)
        # Model code may not read the games' files (their source holds the rules and solutions).
        own = [session.game.files_dir] if session.game.files_dir else []
        self.deny_read = [*own, *(str(p) for p in deny_read)]
        # The host's copy of the game variables: enough to restore a fresh worker.
        self.entries: list[tuple[str, int, int]] = []  # (action display, step, level)
        self.grids: list[np.ndarray] = []
        self.last_anim: list[np.ndarray] = []
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.notes: dict[str, Any] = {}
        self.valid = self.host.names()
        self.synced = 0  # entries the worker has
        self.proc: subprocess.Popen | None = None
        self.workdir: str | None = None
        self.calls = 0
        self._starting: threading.Thread | None = None  # start_soon()'s thread
        self._append("", session.obs)

    # --- game state on the host ------------------------------------------------------
    def _append(self, text: str, obs: Observation, step: int | None = None,
                level: int | None = None) -> None:
        if step is None:
            step, level = self.session.game.actions, self.host.level_number()
        self.entries.append((text, step, level))
        self.grids.append(obs.grid)
        if text:
            self.last_anim = list(obs.frames)

    def _delta(self, start: int) -> tuple[dict[str, Any], bytes]:
        """Entries from `start` on: final boards, plus every animation frame of the last."""
        items, blobs = [], []
        end = len(self.entries)
        for i in range(start, end):
            text, step, level = self.entries[i]
            frames = self.last_anim if (i == end - 1 and text and self.last_anim) else [self.grids[i]]
            items.append({"a": text, "s": step, "l": level, "n": len(frames),
                          "shape": list(frames[-1].shape)})
            blobs += [np.ascontiguousarray(f, dtype=np.int8).tobytes() for f in frames]
        return {"entries": items, "last_result": self.last_result, "valid": self.valid}, b"".join(blobs)

    def act(self, action: Action, info: dict[str, Any] | None = None) -> Observation:
        """An action taken by the host itself (the Duck's automatic RESET after GAME_OVER,
        or a policy acting outside the kernel). The worker hears of it on the next call."""
        n = self.session.game.actions
        obs = self.session.step(action, info)
        if self.session.game.actions > n:
            self._append(display(action), obs)
        self.valid = self.host.names()
        return obs

    def new_turn(self) -> None:
        """`valid_actions` is the game's again at each turn (it matters in the Duck dialect,
        where it is otherwise the last result's)."""
        self.valid = self.host.names()

    # --- process management ----------------------------------------------------------
    def start(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="duck-kernel-")
        h2w_r, h2w_w = os.pipe()
        w2h_r, w2h_w = os.pipe()
        cfg = {"memory_mb": self.cfg.memory_mb, "file_mb": self.cfg.file_mb,
               "open_files": self.cfg.open_files, "deny_read": self.deny_read,
               "notes_chars": self.cfg.notes_dict_chars, "dialect": self.dialect.name}
        env = {"PATH": "/usr/bin:/bin", "HOME": self.workdir, "TMPDIR": self.workdir,
               "LANG": "C.UTF-8", "PYTHONPATH": str(_IMPORT_ROOT), "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "PYTHONBREAKPOINT": "0",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        err = open(os.path.join(self.workdir, ".worker.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "duck.sandbox.worker", str(h2w_r), str(w2h_w), json.dumps(cfg)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=self.workdir,
            env=env, pass_fds=(h2w_r, w2h_w), process_group=0)
        err.close()
        os.close(h2w_r)
        os.close(w2h_w)
        self.wfd, self.reader = h2w_w, wire.Reader(w2h_r)
        got = self.reader.recv(time.monotonic() + 30)
        if got is None or got[0].get("op") != "ready":
            self._kill()
            raise RuntimeError("the kernel worker did not start")
        self.synced = 0
        self._sync(reset=True)

    def start_soon(self) -> None:
        """Start the worker now, in a background thread, instead of at the first run(): a
        game's first model reply takes tens of seconds, and 28 workers starting together when
        their first replies arrived together kept those replies waiting up to 1.4 s on 2
        cores (`python -m duck.bench load`, experiments/LOG.md). run() and close() wait for
        it; a start that failed is tried again by run(), which reports it as before."""
        if self.proc is None and self._starting is None:
            self._starting = threading.Thread(target=self._start_quietly, name="kernel-start", daemon=True)
            self._starting.start()

    def _start_quietly(self) -> None:
        try:
            self.start()
        except Exception:  # noqa: BLE001 - run() starts it again and reports what fails
            pass

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def _sync(self, reset: bool = False) -> None:
        msg, blob = self._delta(self.synced)
        msg |= {"op": "sync", "reset": reset, "notes": self.notes}
        wire.send(self.wfd, msg, blob)
        got = self.reader.recv(time.monotonic() + 30)
        if got is None or got[0].get("op") != "synced":
            raise wire.WireError("the kernel worker did not take the state")
        self.synced = len(self.entries)

    def _kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None
            for fd in (self.wfd, self.reader.fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def restart(self) -> None:
        self._kill()
        self.start()

    def close(self) -> None:
        self._started()
        if self.proc is not None:
            try:
                wire.send(self.wfd, {"op": "exit"})
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- running code ----------------------------------------------------------------
    def run(self, code: str, *, timeout_s: float | None = None, info: dict[str, Any] | None = None,
            gate: Gate | None = None) -> CallResult:
        """Run one snippet. `info` goes into the record with each action; `gate` is asked
        before each of this call's actions (duck.sandbox.actions.Gate)."""
        self._started()
        t0 = time.monotonic()
        timeout = self.cfg.call_timeout_s if timeout_s is None else timeout_s
        if self.session.deadline is not None:  # never run past the game's own deadline
            timeout = max(1.0, min(timeout, self.session.deadline - t0))
        self.calls += 1
        code = code.rstrip()
        if not code:
            res = CallResult("empty", error="python requires a non-empty `code` string.")
            res.message = {"error": res.error}
            return res
        died = self.proc is not None and self.proc.poll() is not None
        if self.proc is None or died:
            self.restart() if died else self.start()
        call = CallActions(gate)
        head, tail = self.dialect.output_split(self.cfg.output_chars)
        out: list[str] = []
        tail_text, total = "", 0
        done: dict[str, Any] | None = None
        crash = None
        deadline = t0 + timeout
        interrupted_at = None
        try:
            if self.synced < len(self.entries):
                self._sync()
            wire.send(self.wfd, {"op": "run", "code": code, "call": self.calls, "head": head, "tail": tail,
                                 "timeout": timeout})
            while done is None:
                limit = deadline if interrupted_at is None else interrupted_at + self.cfg.grace_s
                got = self.reader.recv(limit)
                if got is None:
                    if interrupted_at is None:
                        interrupted_at = time.monotonic()
                        os.kill(self.proc.pid, signal.SIGUSR1)
                        continue
                    crash = "hung"
                    break
                msg, _ = got
                op = msg.get("op")
                if op == "out":
                    out.append(str(msg.get("text", "")))
                elif op == "tail":
                    tail_text, total = str(msg.get("text", "")), int(msg.get("total", 0))
                elif op == "action":
                    self._action(msg, call, info)
                elif op == "done":
                    done = msg
                else:
                    raise wire.WireError(f"unexpected message {op!r}")
        except (wire.WireError, OSError) as e:
            crash = f"{e}"
        if crash is not None:
            try:
                status = self.proc.wait(timeout=0.2) if self.proc else None
            except subprocess.TimeoutExpired:
                status = None
            self._kill()
            self.start()
            kind = "timeout" if crash == "hung" or interrupted_at is not None else "crash"
            res = CallResult(kind, restarted=True, actions=list(call.executed),
                             error_kind="hung" if crash == "hung" else f"exit {status}")
            res.stdout = _cut("".join(out), tail_text, total, head, tail)
            res.stdout_total = total or len(res.stdout)
        else:
            ended = done.get("kind")  # None, syntax, timeout, stopped, or the exception's class
            kind: CallKind = ("stopped" if ended == "stopped" else
                              "timeout" if interrupted_at is not None or ended == "timeout" else
                              "syntax" if ended == "syntax" else "error" if done.get("error") else "ok")
            res = CallResult(kind, error=done.get("error"), result=done.get("result"),
                             action_results=list(done.get("results") or []),
                             actions=list(call.executed), error_kind=done.get("kind"))
            total = int(done.get("total", 0))
            res.stdout = _cut("".join(out), str(done.get("tail", "")), total, head, tail)
            res.stdout_total = total
            if isinstance(done.get("last_result"), dict) and done["last_result"]:
                self.last_result = done["last_result"]
            if isinstance(done.get("notes"), dict):
                self.notes = done["notes"]
        if died and not res.restarted:
            res.restarted = True
            res.error_kind = res.error_kind or "died between calls"
        res.message = self.dialect.render(res, timeout=timeout, limit=self.cfg.output_chars,
                                          notes_error=(done or {}).get("notes_error"), died=died)
        res.wall_ms = (time.monotonic() - t0) * 1000
        return res

    def _action(self, msg: dict[str, Any], call: CallActions, info: dict[str, Any] | None) -> None:
        """Answer one action() request: step the game, send the new boards as a delta."""
        items = msg.get("actions") if isinstance(msg.get("actions"), list) else []
        items = [i for i in items if isinstance(i, dict)]
        error = None
        try:
            result, done, end = self.host.run_batch(items, call, info)
        except Exception as e:  # noqa: BLE001 - the game or our code failed: tell the snippet
            result, done, end, error = {}, [], False, "action failed in sandbox host."
            self.session.event("error", f"kernel action failed: {type(e).__name__}: {e}",
                               traceback.format_exc(limit=6))
        for text, obs, step, level in done:
            self._append(text, obs, step, level)
        if result:
            self.last_result = result
            self.valid = (result["valid_actions"] if self.dialect.valid_actions_from_results
                          else self.host.names())
        reply, blob = self._delta(self.synced)
        if result.get("stop_reason", "").startswith("previous_"):
            reply["valid"] = []
        reply |= {"op": "action_reply", "result": result, "end": end, "error": error}
        wire.send(self.wfd, reply, blob)
        self.synced = len(self.entries)


def _cut(head_text: str, tail_text: str, total: int, head: int, tail: int) -> str:
    """Head and tail of a stream of `total` characters, with a note of what was cut."""
    if total <= len(head_text) + len(tail_text) or tail == 0:
        return head_text + tail_text
    return f"{head_text}\n... [{total - len(head_text) - len(tail_text)} chars cut] ...\n{tail_text}"
