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

The worker is untrusted once it has run a snippet. The threat model and the layers around it
(its own uid, Landlock, seccomp, namespaces, hard limits; the guard only for messages) are in
the package's docstring (duck/sandbox/__init__.py). Here, the host's half: every message
from the worker is checked and cut to size (duck.sandbox.trust), every write to it has a
deadline, threads and processes that outlive a call are ended, the temp dir's size is
watched where no tmpfs bounds it, and a worker that misbehaves is killed and restarted with
a message that says why.

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
from duck.sandbox import cgroup, handoff, isolation, process, quota, trust, wire
from duck.sandbox.actions import ActionHost, CallActions, Gate
from duck.sandbox.dialect import OURS, Dialect

WRITE_DEADLINE_S = 10.0  # a worker that reads nothing for this long is dead to the host
MAX_WORKER_MESSAGE = 8 << 20  # bytes; larger is a protocol violation
QUOTA_CHECK_S = 0.5  # how often the temp dir's size is checked while a call runs (no tmpfs)
RESULTS_CHARS = 200_000  # a call's action results as the worker returns them (~1 KB each, 200 at most)
MESSAGE_CHARS = 32_000  # the whole tool message of one call, whatever the worker sent


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
    notice: str | None = None  # what the host did about the worker (ended a thread, a process)
    steps: list[Any] = field(default_factory=list)  # duck.game.change.Step per action played (its frames)

    @property
    def text(self) -> str:
        return json.dumps(self.message, indent=2)


class Kernel:
    def __init__(self, session: Session, config: KernelConfig | None = None, *, dialect: Dialect = OURS,
                 time_limit_s: float | None = None, deny_read: list[str] | tuple[str, ...] = (),
                 tools: bool = False, explore: handoff.Explore | None = None) -> None:
        self.session = session
        # The world-model tools in the worker (duck.sandbox.tools) and the explorer their
        # explore(n) hands actions to (duck.sandbox.handoff; injected by duck.policies).
        self.tools, self.explore = tools, explore
        self.cfg = config or KernelConfig()
        self.dialect = dialect
        self.host = ActionHost(session, dialect, time_limit_s)
        # Model code may not read the games' files (their source holds the rules and solutions).
        own = [session.game.files_dir] if session.game.files_dir else []
        self.deny_read = [*own, *(str(p) for p in deny_read)]
        # Hidden from the worker where a mount namespace allows, closed by file modes (and
        # verified) where not: the games, the records and the conversations.
        records = Path(session.writer.path).resolve().parent
        self.hide = [*self.deny_read, str(records), str(records.parent / "conversations")]
        self.lease: isolation.UidLease | None = None
        self.layers: dict[str, str] = {}
        self.tmpfs = False
        # The host's copy of the game variables: enough to restore a fresh worker.
        self.entries: list[tuple[str, int, int]] = []  # (action display, step, level)
        self.grids: list[np.ndarray] = []
        self.last_anim: list[np.ndarray] = []
        self.anims: dict[int, list[np.ndarray]] = {}  # entry -> its frames, until the worker has them
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.notes: dict[str, Any] = {}
        self.valid = self.host.names()
        self.synced = 0  # entries the worker has
        self.proc: subprocess.Popen | None = None
        self.worker: process.Started | None = None
        self.cgroup: dict[str, Any] | None = None  # the worker's memory cgroup (duck.sandbox.cgroup)
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
            self.anims[len(self.entries) - 1] = self.last_anim

    def _delta(self, start: int) -> tuple[dict[str, Any], bytes]:
        """Entries from `start` on with every animation frame of each action not sent yet (a
        batch's), or, after a restart, of the last action only."""
        items, blobs = [], []
        end = len(self.entries)
        for i in range(start, end):
            text, step, level = self.entries[i]
            frames = self.anims.get(i) or (self.last_anim if (i == end - 1 and text and self.last_anim)
                                           else [self.grids[i]])
            items.append({"a": text, "s": step, "l": level, "n": len(frames),
                          "shape": list(frames[-1].shape)})
            blobs += [np.ascontiguousarray(f, dtype=np.int8).tobytes() for f in frames]
        self.anims.clear()
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
        t0 = time.monotonic()
        if os.geteuid() == 0 and self.lease is None and "uid" not in self.cfg.layers_off:
            self.lease = isolation.UidLease.take()
        uid = self.lease.uid if self.lease else None
        self.workdir = tempfile.mkdtemp(prefix="duck-kernel-")
        if uid is not None:
            os.chown(self.workdir, uid, uid)
        plan = isolation.plan(workdir=self.workdir, uid=uid, memory_mb=self.cfg.memory_mb,
                              file_mb=self.cfg.file_mb, open_files=self.cfg.open_files,
                              disk_mb=self.cfg.disk_mb, disk_inodes=self.cfg.disk_inodes, hide=self.hide,
                              off=self.cfg.layers_off)
        if "cgroup" in self.cfg.layers_off or os.geteuid() != 0:
            plan["cgroup_off"] = "turned off" if os.geteuid() == 0 else "not root"
        else:
            self.cgroup, plan["cgroup_off"] = cgroup.make(isolation.cgroup_limit(plan))
            plan["cgroup"] = self.cgroup
        cfg = {"plan": plan, "deny_read": self.deny_read, "notes_chars": self.cfg.notes_dict_chars,
               "dialect": self.dialect.name, "tools": self.tools}
        self.worker = process.spawn(cfg, self.workdir, MAX_WORKER_MESSAGE)
        self.proc, self.wfd, self.reader = self.worker.proc, self.worker.wfd, self.worker.reader
        msg = process.ready(self.worker, time.monotonic() + process.START_S)
        if msg is None:
            log = self._worker_log()
            self._kill()
            raise RuntimeError(f"the kernel worker did not start{': ' + log if log else ''}")
        layers = {trust.text(k, 40): trust.text(v, 300) for k, v in msg["layers"].items()}
        if layers != self.layers:  # the first start, or a restart that got other layers
            self.session.event("sandbox", f"kernel worker confined in {(time.monotonic() - t0) * 1000:.0f} ms",
                               layers)
            self.layers = layers
        self.tmpfs = layers.get("disk_quota", "").startswith("on: tmpfs")
        self.synced = 0
        self._sync(reset=True)

    def _worker_log(self) -> str:
        try:
            with open(os.path.join(self.workdir or "", ".worker.log"), "rb") as f:
                lines = f.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
            return lines[-1] if lines else ""
        except OSError:
            return ""

    def _send(self, msg: dict[str, Any], blob: bytes = b"") -> None:
        wire.send(self.wfd, msg, blob, deadline=time.monotonic() + WRITE_DEADLINE_S)

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
        self._send(msg, blob)
        got = self.reader.recv(time.monotonic() + 30)
        if got is None:
            raise wire.WireError("the kernel worker did not take the state")
        trust.check(got[0], ("synced",))
        self.synced = len(self.entries)

    def _kill(self) -> None:
        """End the worker whatever its code did (duck.sandbox.process.end: by pid, group and
        uid, every wait with a time-out), then what it left: its cgroup, its files outside
        the temp dir (where no tmpfs or Landlock kept it in), the temp dir."""
        uid = self.lease.uid if self.lease else None
        if self.worker is not None:
            note = process.end(self.worker, uid)
            if note:
                self.session.event("error", note)
            self.worker = self.proc = None
        elif uid is not None:
            process.end_uid(uid)
        cgroup.remove(self.cgroup)
        self.cgroup = None
        if uid is not None and self._shared_writable():
            quota.remove_owned(uid, skip=self.workdir)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _shared_writable(self) -> bool:
        """Whether the worker can write /tmp, /var/tmp or /dev/shm (no Landlock holds)."""
        return not self.layers.get("filesystem", "").startswith("on: landlock")

    def _counted(self) -> bool:
        """Whether the host must count the worker's disk use (no tmpfs, or shared folders open)."""
        return bool(self.workdir) and (not self.tmpfs or (self.lease is not None and self._shared_writable()))

    def _over_quota(self) -> bool:
        """Past `kernel.disk_mb` or `kernel.disk_inodes`, counting what no tmpfs bounds
        (duck.sandbox.quota): the temp dir where it is a plain folder, the worker's unlinked
        open files, and what its uid owns in the shared folders where no Landlock closes them."""
        if not self._counted():
            return False
        limit = quota.Usage(self.cfg.disk_mb << 20, self.cfg.disk_inodes)
        uid = self.lease.uid if self.lease and self._shared_writable() else None
        pid = self.proc.pid if self.proc else None
        used = quota.Usage() if self.tmpfs else quota.usage(self.workdir, None, pid, limit)
        if uid is not None:
            for p in quota.owned(uid, skip=self.workdir):
                used.add(quota.tree(p, limit))
        return used.over(limit.bytes, limit.inodes)

    def _ended_leftovers(self) -> tuple[str | None, bool]:
        """End what outlived the call: processes are killed; a thread cannot be ended alone,
        so the worker is restarted. Returns what was done, for the model, and whether the
        worker was restarted."""
        if self.proc is None or self.proc.poll() is not None:
            return None, False
        said = []
        # Where the kernel itself refuses new processes (one process for the uid, or the
        # seccomp rule) there is nothing to look for; the scan of /proc costs ~8 ms.
        no_children = "one process" in self.layers.get("limits", "") or self.layers.get("seccomp", "").startswith("on")
        others = [] if no_children else process.leftovers(self.proc.pid, self.lease.uid if self.lease else None)
        for p in others:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if others:
            said.append(f"{len(others)} process(es) started by your code outlived the call and were ended")
        restarted = process.threads(self.proc.pid) > 1
        if restarted:
            self.restart()
            said.append("a thread started by your code outlived the call: the kernel was restarted, your "
                        "functions and variables are gone (game variables and notes are restored)")
        return "; ".join(said) or None, restarted

    def restart(self) -> None:
        self._kill()
        self.start()

    def close(self) -> None:
        self._started()
        if self.proc is not None:
            try:
                self._send({"op": "exit"})
                self.proc.wait(timeout=2)
            except (OSError, wire.WireError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self.lease:
            self.lease.release()
            self.lease = None

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
        head_left = head
        tail_text, total = "", 0
        done: dict[str, Any] | None = None
        crash = None
        deadline = t0 + timeout
        interrupted_at = None
        try:
            if self.synced < len(self.entries):
                self._sync()
            self._send({"op": "run", "code": code, "call": self.calls, "head": head, "tail": tail,
                        "timeout": timeout})
            while done is None:
                limit = deadline if interrupted_at is None else interrupted_at + self.cfg.grace_s
                got = self.reader.recv(min(limit, time.monotonic() + QUOTA_CHECK_S) if self._counted() else limit)
                if got is None:
                    if self._over_quota():
                        crash = (f"its temp dir outgrew the disk quota of {self.cfg.disk_mb} MB "
                                 f"or {self.cfg.disk_inodes} files")
                        break
                    if time.monotonic() < limit:
                        continue
                    if interrupted_at is None:
                        interrupted_at = time.monotonic()
                        os.kill(self.proc.pid, signal.SIGUSR1)
                        continue
                    crash = "hung"
                    break
                msg = trust.check(got[0], ("out", "tail", "action", "explore", "done"))
                op = msg["op"]
                if op == "out":  # the head's room is for the whole call, never per message
                    if head_left > 0:
                        part = trust.text(msg["text"][:head_left])
                        head_left -= len(part)
                        out.append(part)
                elif op == "tail":
                    tail_text, total = trust.text(msg["text"], tail), msg["total"]
                elif op == "action":
                    self._action(msg, call, info)
                elif op == "explore":
                    self._explore(msg, call, info)
                else:
                    done = msg
        except (wire.PipeClosed, OSError) as e:
            crash = f"{e}"
        except wire.WireError as e:  # a message the protocol does not allow (trust.Misbehaved too)
            crash = f"protocol violation: {e}"
        if crash is not None:
            try:
                status = self.proc.wait(timeout=0.2) if self.proc else None
            except subprocess.TimeoutExpired:
                status = None
            self._kill()
            self.start()
            kind = "timeout" if crash == "hung" or interrupted_at is not None else "crash"
            error_kind = ("hung" if crash == "hung" else crash if crash.startswith(("protocol", "its temp"))
                          else f"exit {status}")
            res = CallResult(kind, restarted=True, actions=list(call.executed), error_kind=error_kind)
            res.stdout = _cut("".join(out), tail_text, total, head, tail)
            res.stdout_total = total or len(res.stdout)
        else:
            ended = done.get("kind")  # None, syntax, timeout, stopped, or the exception's class
            kind: CallKind = ("stopped" if ended == "stopped" else
                              "timeout" if interrupted_at is not None or ended == "timeout" else
                              "syntax" if ended == "syntax" else "error" if done.get("error") else "ok")
            results = [r for r in trust.clean(done["results"], budget=[RESULTS_CHARS]) if isinstance(r, dict)]
            res = CallResult(kind, error=trust.text(done["error"]) if done.get("error") else None,
                             result=trust.clean(done.get("result")), action_results=results,
                             actions=list(call.executed),
                             error_kind=trust.text(ended, 100) if ended is not None else None)
            total = done["total"]
            res.stdout = _cut("".join(out), trust.text(done["tail"], tail), total, head, tail)
            res.stdout_total = total
            last = trust.clean(done["last_result"])
            if isinstance(last, dict) and last:
                self.last_result = last
            notes = done.get("notes")
            if isinstance(notes, dict):
                notes = trust.clean(notes)
                if len(json.dumps(notes)) <= self.cfg.notes_dict_chars:
                    self.notes = notes
            res.notice, res.restarted = self._ended_leftovers()
            if res.notice is None and self._over_quota():
                self.restart()
                res.restarted = True
                res.notice = (f"the kernel's temp dir outgrew the disk quota of {self.cfg.disk_mb} MB or "
                              f"{self.cfg.disk_inodes} files: the "
                              "kernel was restarted, your functions, variables and files are gone")
        if died and not res.restarted:
            res.restarted = True
            res.error_kind = res.error_kind or "died between calls"
        res.steps = call.steps
        notes_error = trust.text(done["notes_error"], 500) if done and done.get("notes_error") else None
        res.message = trust.bounded(self.dialect.render(res, timeout=timeout, limit=self.cfg.output_chars,
                                                        notes_error=notes_error, died=died),
                                    max(MESSAGE_CHARS, 4 * self.cfg.output_chars))
        res.wall_ms = (time.monotonic() - t0) * 1000
        return res

    def _action(self, msg: dict[str, Any], call: CallActions, info: dict[str, Any] | None) -> None:
        """Answer one action() request: step the game, send the new boards as a delta."""
        items = msg["actions"]  # checked by trust.check
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
        self._send(reply, blob)
        self.synced = len(self.entries)

    def _explore(self, msg: dict[str, Any], call: CallActions, info: dict[str, Any] | None) -> None:
        """Answer one explore(n) request: the explorer plays (duck.sandbox.handoff), the new
        boards go back as a delta."""
        result = handoff.run(self, msg, call, info)
        reply, blob = self._delta(self.synced)
        self._send(reply | {"op": "explore_reply", "result": result}, blob)
        self.synced = len(self.entries)


def _cut(head_text: str, tail_text: str, total: int, head: int, tail: int) -> str:
    """Head and tail of a stream of `total` characters, with a note of what was cut."""
    if total <= len(head_text) + len(tail_text) or tail == 0:
        return head_text + tail_text
    return f"{head_text}\n... [{total - len(head_text) - len(tail_text)} chars cut] ...\n{tail_text}"
