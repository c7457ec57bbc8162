"""The kernel's worker and each call's process, host side: start, end, restart, what they leave.

Starting: a uid of its own where the host is root (`isolation.UidLease`), a temp dir, the plan of
the layers (`isolation.plan`), a memory cgroup where one can be made, then `process.spawn` and the
worker's `ready` with the layers it verified (a `sandbox` event, again when a restart got other
ones). Each call: `begin_call(pid)` (a pidfd of the call's process, the quota's clock:
duck.sandbox.wall.clock), `signal_call`, `end_call` (killed, waited for); then what it left: a
process is killed (none can be where the kernel refuses new ones), and where no tmpfs bounds the
temp dir it is counted once (`over_quota`). Ending: `process.end` (by pid, group and uid, every
wait with a time-out), its cgroup, what its uid left outside the temp dir, the temp dir. Clean-up
cannot crash: every step is caught and recorded, and the uid lease is always released.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable

from duck.config import KernelConfig
from duck.sandbox import process, wire
from duck.sandbox.wall import cgroup, clock, isolation, quota

WRITE_DEADLINE_S = 10.0  # a worker that reads nothing for this long is dead to the host
MAX_WORKER_MESSAGE = 8 << 20  # bytes; larger is a protocol violation


class WorkerProcess:
    """At most one worker process at a time. `hide`: folders the worker must not see (the
    games, the records, the conversations); `event(kind, message, data)`: the game record's.
    A subclass says what else the worker is told at start (`worker_config`)."""

    def __init__(self, cfg: KernelConfig, hide: list[str], event: Callable[..., None]) -> None:
        self.cfg, self.hide, self.event = cfg, hide, event
        self.lease: isolation.UidLease | None = None
        self.layers: dict[str, str] = {}
        self.tmpfs = False
        self.proc: subprocess.Popen | None = None
        self.worker: process.Started | None = None
        self.cgroup: dict[str, Any] | None = None  # the worker's memory cgroup (duck.sandbox.wall.cgroup)
        self.workdir: str | None = None
        self._starting: threading.Thread | None = None  # start_soon()'s thread
        self.quota_hit: str | None = None  # why the clock killed the worker (taken by the next crash)
        self.clock: clock.Clock | None = None  # the quota's, while a call runs
        self.watches: clock.Watches | None = None  # its inotify watches of the temp dir (kept across calls)
        self.call_pid: int | None = None  # the process of the call under way (duck.sandbox.call)
        self.call_fd = -1  # and a pidfd of it: never a reused pid
        self.last_call: int | None = None  # the last one, a zombie until the worker's next message

    def worker_config(self) -> dict[str, Any]:
        """What the worker is told at start besides its plan."""
        return {}

    def start(self) -> None:
        t0 = time.monotonic()
        if os.geteuid() == 0 and self.lease is None and "uid" not in self.cfg.layers_off:
            self.lease = isolation.UidLease.take()
        uid = self.lease.uid if self.lease else None
        self.workdir = tempfile.mkdtemp(prefix="duck-kernel-")
        if uid is not None:
            os.chown(self.workdir, uid, uid)
        plan = isolation.plan(workdir=self.workdir, uid=uid, memory_mb=self.cfg.memory_mb,
                              disk_mb=self.cfg.disk_mb, disk_inodes=self.cfg.disk_inodes, hide=self.hide,
                              off=self.cfg.layers_off)
        if "cgroup" in self.cfg.layers_off or os.geteuid() != 0:
            plan["cgroup_off"] = "turned off" if os.geteuid() == 0 else "not root"
        else:
            self.cgroup, plan["cgroup_off"] = cgroup.make(isolation.cgroup_limit(plan))
            plan["cgroup"] = self.cgroup
        self.worker = process.spawn({"plan": plan, **self.worker_config()}, self.workdir, MAX_WORKER_MESSAGE)
        self.proc = self.worker.proc
        layers = process.ready(self.worker, uid)
        if layers is None:
            log = process.last_error_line(self.worker)
            self.kill()
            raise RuntimeError(f"the kernel worker did not start{': ' + log if log else ''}")
        if layers != self.layers:  # the first start, or a restart that got other layers
            ms = (time.monotonic() - t0) * 1000
            self.event("sandbox", f"kernel worker confined in {ms:.0f} ms", layers)
            self.layers = layers
        self.tmpfs = layers.get("disk_quota", "").startswith("on: tmpfs")

    def send(self, msg: dict[str, Any], blob: bytes = b"", deadline: float | None = None) -> None:
        """Write to the worker; a worker that does not read by `deadline` (at most
        WRITE_DEADLINE_S from now) is a WireError."""
        assert self.worker is not None
        end = time.monotonic() + WRITE_DEADLINE_S
        wire.send(self.worker.wfd, msg, blob, deadline=end if deadline is None else min(end, deadline))

    def recv(self, deadline: float) -> tuple[dict[str, Any], bytes] | None:
        """The worker's next message, or None at the deadline."""
        assert self.worker is not None
        return self.worker.reader.recv(deadline)

    def start_soon(self) -> None:
        """Start the worker now, in a background thread, instead of at the first call: a
        game's first model reply takes tens of seconds, and 28 workers starting together when
        their first replies arrived together kept those replies waiting up to 1.4 s on 2
        cores (`duck bench load`, experiments/LOG.md). A call and close() wait for
        it; a start that failed is tried again by the call, which reports it as before."""
        if self.proc is None and self._starting is None:
            self._starting = threading.Thread(target=self._start_quietly, name="kernel-start", daemon=True)
            self._starting.start()

    def _start_quietly(self) -> None:
        try:
            self.start()
        except Exception:  # noqa: BLE001 - the next call starts it again and reports what fails
            pass

    def started(self) -> None:
        """Wait for start_soon()'s start, if one is under way."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def kill(self) -> None:
        """End the worker whatever its code did (duck.sandbox.process.end: by pid, group and
        uid, every wait with a time-out), then what it left: its cgroup, its files outside
        the temp dir (where no tmpfs or Landlock kept it in), the temp dir. No step's failure
        stops the next: each is recorded as an `error` event."""
        uid = self.lease.uid if self.lease else None
        self.end_call()
        if self.watches is not None:
            self.watches.close()
            self.watches = None
        worker, self.worker, self.proc = self.worker, None, None
        cg, self.cgroup = self.cgroup, None
        workdir, self.workdir = self.workdir, None
        shared = uid is not None and self._shared_writable()
        steps = (("end the worker", lambda: self._end(worker, uid)),
                 ("remove its cgroup", lambda: cgroup.remove(cg)),
                 ("remove its files in the shared folders",
                  lambda: shared and quota.remove_owned(uid, skip=workdir)),
                 ("remove its temp dir", lambda: workdir and quota.remove_tree(workdir)))
        for what, step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - clean-up goes on; what failed is recorded
                self._record(f"kernel clean-up could not {what}: {type(e).__name__}: {e}")

    def _end(self, worker: process.Started | None, uid: int | None) -> None:
        if worker is not None:
            note = process.end(worker, uid)
            if note:
                self._record(note)
        elif uid is not None:
            process.end_uid(uid)

    def _record(self, message: str) -> None:
        try:
            self.event("error", message)
        except Exception:  # noqa: BLE001 - a record that cannot be written must not stop the clean-up
            pass

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        """Ask the worker to exit, end it and what it left, release its uid: whatever fails."""
        try:
            self.started()
            if self.proc is not None:
                try:
                    self.send({"op": "exit"})
                    self.proc.wait(timeout=2)
                except (OSError, wire.WireError, subprocess.TimeoutExpired):
                    pass
            self.kill()
        except Exception as e:  # noqa: BLE001 - the lease below must go back whatever happened
            self._record(f"kernel close failed: {type(e).__name__}: {e}")
        finally:
            if self.lease:
                self.lease.release()
                self.lease = None

    def __enter__(self) -> "WorkerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- what outlives a call --------------------------------------------------------
    def _shared_writable(self) -> bool:
        """Whether the worker can write /tmp, /var/tmp or /dev/shm (no Landlock holds)."""
        return not self.layers.get("filesystem", "").startswith("on: landlock")

    def counted(self) -> bool:
        """Whether the host must count the worker's disk use (no tmpfs, or shared folders open)."""
        return bool(self.workdir) and (not self.tmpfs or (self.lease is not None and self._shared_writable()))

    def _limit(self) -> quota.Usage:
        return quota.Usage(self.cfg.disk_mb << 20, self.cfg.disk_inodes)

    def _usage(self, workdir: str | None, pid: int | None, on_dir: Any = None) -> quota.Usage:
        uid = self.lease.uid if self.lease else None
        return quota.usage(None if self.tmpfs else workdir, uid if self._shared_writable() else None, pid,
                           self._limit(), file_bytes=isolation.FILE_MB << 20, fs_uid=uid, on_dir=on_dir)

    def over_quota(self) -> bool:
        """Past `kernel.disk_mb` or `kernel.disk_inodes`, counting what no tmpfs bounds
        (duck.sandbox.wall.quota): the temp dir where it is a plain folder, the worker's deleted
        open or mapped files, and what its uid owns in the shared folders where no Landlock
        closes them. What cannot be counted is over (and recorded)."""
        if not self.counted():
            return False
        used = self._usage(self.workdir, self.call_pid)
        if used.unseen:
            self._record(f"kernel disk quota: {used.unseen}")
        return used.over(self.cfg.disk_mb << 20, self.cfg.disk_inodes)

    def quota_message(self) -> str:
        return f"its temp dir outgrew the disk quota of {self.cfg.disk_mb} MB or {self.cfg.disk_inodes} files"

    # --- the call's process ---------------------------------------------------------------
    def begin_call(self, pid: int) -> None:
        """The worker forked `pid` for this call (it runs nothing before the worker hears back:
        the pid is its own, and it stays a zombie until the worker's next message)."""
        self.call_pid, self.call_fd = pid, os.pidfd_open(pid)
        self._watch()

    def signal_call(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self.call_fd, sig)
        except OSError:
            pass  # it has ended: the pipe says so

    def end_call(self) -> None:
        """Kill the call's process (whatever its code left running ends with it) and wait until
        it has exited: nothing it writes can follow."""
        self._unwatch()
        if self.call_pid is None:
            return
        pid, fd, self.last_call = self.call_pid, self.call_fd, self.call_pid
        self.call_pid, self.call_fd = None, -1
        if self.lease is None:  # no uid of its own: its children are found by descent
            process.kill_all(process.descendants(pid))
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], process.REAP_S)  # readable once it has exited
        except OSError:
            pass
        finally:
            os.close(fd)

    def _watch(self) -> None:
        """While the call runs, its disk use on the quota's clock (duck.sandbox.wall.clock) where no
        tmpfs bounds it: past the quota the clock kills the call's process and `quota_hit` says
        why, for the call that sees it die (Kernel._crashed)."""
        if not self.counted() or self.call_pid is None:
            return
        workdir, pid, uid = self.workdir, self.call_pid, self.lease.uid if self.lease else None
        paths = [workdir, *(quota.SHARED if uid is not None and self._shared_writable() else ())]
        self.quota_hit = None
        if self.watches is None:
            self.watches = clock.Watches()
        self.clock = clock.Clock(lambda on_dir: self._usage(workdir, pid, on_dir), self._limit(), paths, pid,
                                 self.call_fd, isolation.FILE_MB << 20, self.watches)
        self.clock.start()

    def _unwatch(self) -> None:
        if self.clock is not None:
            self.clock.stop()
            if self.clock.hit:
                self.quota_hit = f"{self.quota_message()} ({self.clock.hit})"
            self.clock = None

    def end_leftovers(self) -> str | None:
        """After the call's process has ended: any other process it started is killed (none can be
        where the kernel refuses new processes). Returns what was done, for the model."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        # Where the kernel itself refuses new processes (RLIMIT_NPROC for the uid, or the seccomp
        # rule) there is nothing to look for; the scan of /proc costs ~8 ms.
        no_children = ("one process" in self.layers.get("limits", "")
                       or self.layers.get("seccomp", "").startswith("on"))
        uid = self.lease.uid if self.lease else None
        others = [] if no_children else [p for p in process.leftovers(self.proc.pid, uid)
                                         if p != self.last_call]
        if process.kill_all(others):
            return f"{len(others)} process(es) started by your code outlived the call and were ended"
        return None
