"""The operating system's layers around the worker (host side): what this machine allows
(`report()`), the plan a worker confines itself by (`plan()`), a uid of its own per worker
(`UidLease`), and the processes and threads left behind by a call (`leftovers`, `end_uid`).

`report()` is what the record header and `duck doctor` show: one entry per layer, "on ..."
or "off: why", as a probe worker verified them on this machine (never what was merely
attempted: issue 30). Each kernel's worker applies its own plan (duck.sandbox.wall.confine),
verifies each layer and answers with what holds; the host records it in a `sandbox` event.

Processes are reaped by what is unforgeably theirs: a uid leased to one worker at a time (an
flock per uid, so two runs on one machine never share one and never end each other's), or,
without root, the worker's own descendants. Nothing here counts or kills by the uid range.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pwd
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from typing import Any

from duck.play import record
from duck.sandbox import process
from duck.sandbox.wall import cgroup, landlock, quota
from duck.sandbox.wall.confine import LAYERS
from duck.sandbox.process import end_uid

UID_BASE = 1_790_000  # far above any distribution's ranges; each worker takes one free uid
UID_SLOTS = 4096


def python_paths() -> list[str]:
    """The read-only Python installation the worker may read: the standard library and the
    site-packages (never the checkout: the editable install's source is imported before the
    worker confines itself)."""
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    paths = {os.path.realpath(p) for k in keys if (p := sysconfig.get_paths().get(k))}
    paths |= {os.path.realpath(p) for k in keys
              if (p := sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
                  .get(k))}
    return sorted(p for p in paths if os.path.isdir(p))


def _probe_plan(workdir: str, uid: int | None) -> dict[str, Any]:
    from duck.config import KernelConfig  # the defaults every kernel starts from

    k = KernelConfig()
    return plan(workdir=workdir, uid=uid, memory_mb=k.memory_mb, disk_mb=k.disk_mb, disk_inodes=k.disk_inodes,
                hide=[])


@functools.cache
def report() -> dict[str, str]:
    """The layers a kernel worker gets on this machine with the default kernel config, as a
    probe worker verified them (duck.sandbox.process.probe): what every record header and
    `duck doctor` show. A kernel's own worker reports its layers in the record's `sandbox`
    event; with the default config the two are equal."""
    lease = UidLease.take() if os.geteuid() == 0 else None
    workdir = tempfile.mkdtemp(prefix="duck-probe-")
    cg = None
    try:
        if lease:
            os.chown(workdir, lease.uid, lease.uid)
        p = _probe_plan(workdir, lease.uid if lease else None)
        cg, p["cgroup_off"] = cgroup.make(cgroup_limit(p)) if os.geteuid() == 0 else (None, "not root")
        p["cgroup"] = cg
        got = process.probe({"plan": p, "deny_read": [], "notes_chars": 100},
                            workdir)
    except OSError as e:
        got = f"{type(e).__name__}: {e}"
    finally:
        cgroup.remove(cg)
        try:
            quota.remove_tree(workdir)
        except OSError:
            pass  # a probe's empty temp dir: what it left is no reason to lose the report
        if lease:
            lease.release()
    if isinstance(got, str):  # no worker could start: every layer is unknown, the kernel unusable
        return {name: f"off: the probe worker did not start ({got})" for name in LAYERS}
    return got


def without_mount_namespace(off: list[str] | tuple[str, ...] = ()) -> bool:
    """The worker has a uid of its own but no mount namespace hides the run's records from it
    (verified here, or turned off): Landlock does not mediate inotify or stat, so the run's
    folders are closed by file modes (issue 37: the records were watchable)."""
    r = report()
    return r["uid"].startswith("on") and "uid" not in off and (not r["mounts"].startswith("on") or "namespaces" in off)


def relies_on_file_modes(off: list[str] | tuple[str, ...] = ()) -> bool:
    """Neither Landlock nor a mount namespace holds (on this machine, as verified, or turned off
    by `kernel.layers_off`) but the worker has a uid of its own: the games and the records are
    kept from it only by file modes, so they must be played from root-only copies and the
    records and conversations folders closed (duck.sandbox.fallback)."""
    return without_mount_namespace(off) and (not report()["filesystem"].startswith("on: landlock") or "landlock" in off)


def cgroup_limit(p: dict[str, Any]) -> int:
    """A worker's memory cgroup: its address space, its tmpfs and 64 MB for what the kernel
    holds on its behalf (page tables, inodes, pipes)."""
    return (int(p["memory_mb"]) + int(p["disk_mb"]) + 64) << 20


def _closed_probe() -> str:
    """A root-only file in the host's private folder: the worker's uid must not open it."""
    path = os.path.join(_lock_dir(), "closed-probe")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.close(fd)
    return path


FILE_MB = 16  # the largest file model code may write in its temp dir
OPEN_FILES = 64  # its open files


def plan(*, workdir: str, uid: int | None, memory_mb: int, disk_mb: int, disk_inodes: int, hide: list[str],
         off: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """What the worker applies to itself (duck.sandbox.wall.confine); `off`: layers left out. The
    host adds `cgroup` (duck.sandbox.wall.cgroup) before it starts the worker."""
    return {"workdir": workdir, "uid": uid, "gid": uid, "memory_mb": memory_mb, "file_mb": FILE_MB,
            "open_files": OPEN_FILES, "disk_mb": disk_mb, "disk_inodes": disk_inodes, "read": python_paths(),
            "hide": sorted({os.path.realpath(h) for h in hide}), "off": sorted(off),
            "landlock": landlock.abi() >= 1 and "landlock" not in off, "host_pid": os.getpid(),
            "closed_probe": _closed_probe() if uid is not None else None, "cgroup": None}


# --- a uid per worker ------------------------------------------------------------------

def _lock_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), f".duck-sandbox-uids-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{d} is not a private folder")
    return d


@dataclass
class UidLease:
    """A uid no other worker on this machine uses while the lease is held (an flock)."""

    uid: int
    fd: int

    @classmethod
    def take(cls) -> "UidLease":
        folder = _lock_dir()
        start = os.getpid() % UID_SLOTS
        for i in range(UID_SLOTS):
            uid = UID_BASE + (start + i) % UID_SLOTS
            try:
                pwd.getpwuid(uid)
                continue  # a real user: never ours
            except KeyError:
                pass
            fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            end_uid(uid)  # anything a crashed host's worker left behind
            return cls(uid, fd)
        raise OSError("no free sandbox uid")

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


record.HEADER_EXTRAS["sandbox"] = report  # every record header says which layers confine the kernel
