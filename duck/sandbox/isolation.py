"""The operating system's layers around the worker (host side): what this machine allows
(`report()`), the plan a worker confines itself by (`plan()`), a uid of its own per worker
(`UidLease`), and the processes and threads left behind by a call (`leftovers`, `end_uid`).

`report()` is what the record header and `duck doctor` show: one entry per layer, "on ..."
or "off: why". The worker applies the plan (duck.sandbox.confine) and answers with what it
really applied; the host records any difference as an event.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pwd
import signal
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from typing import Any

from duck.play import record
from duck.sandbox import landlock
from duck.sandbox.confine import closed_ancestor

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


def _probe_namespaces() -> str | None:
    """None when a child can make network and mount namespaces here, else why not."""
    try:
        r = subprocess.run([sys.executable, "-S", "-c", "import os; os.unshare(os.CLONE_NEWNET | os.CLONE_NEWNS)"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["refused"])[-1]


def _seccomp_ready() -> str | None:
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError, AttributeError, TypeError) as e:
        return f"{type(e).__name__}: {e} (pip install pyseccomp; apt-get install libseccomp2)"
    return None


@functools.cache
def report() -> dict[str, str]:
    """The layers a worker gets on this machine, as the plan will ask for them."""
    root = os.geteuid() == 0
    ns = _probe_namespaces() if root else "not root"
    abi = landlock.abi()
    sec = _seccomp_ready()
    closed = [p for p in python_paths() if closed_ancestor(p)] if ns is not None else []
    out = {
        "uid": ("off: the host is not root" if not root else
                f"off: the Python installation ({closed[0]}) is closed to other users" if closed else
                "on: a uid of its own per worker, no groups"),
        "seccomp": "on: libseccomp filter" if sec is None else f"off: {sec}",
        "network": ("on: network namespace" if ns is None else
                    "on: seccomp allows AF_UNIX sockets only" if sec is None else
                    f"on: landlock denies TCP (ABI {abi})" if abi >= 4 else f"off: {ns}; no seccomp"),
        "filesystem": (f"on: landlock ABI {abi}" if abi >= 1 else
                       "on: file modes (root-only copies of the games; records folder closed)" if root
                       else "off: no landlock and not root (only the guard's messages)"),
        "mounts": "on: private mount namespace" if ns is None else f"off: {ns}",
        "disk_quota": "on: tmpfs on the temp dir" if ns is None else "on: checked by the host by size",
        "limits": "on: hard rlimits" + (", one process per worker uid" if root else ""),
        "guard": "on: in-process audit hook (clear messages only, not a wall)",
    }
    return out


def relies_on_file_modes(off: list[str] | tuple[str, ...] = ()) -> bool:
    """No landlock and no mount namespace (on this machine, or turned off by `kernel.layers_off`):
    the worker's uid is kept from the games and the records only by file modes, so they must be
    played from root-only copies."""
    r = report()
    return r["uid"].startswith("on") and "uid" not in off \
        and (not r["filesystem"].startswith("on: landlock") or "landlock" in off) \
        and (not r["mounts"].startswith("on") or "namespaces" in off)


def plan(*, workdir: str, uid: int | None, memory_mb: int, file_mb: int, open_files: int,
         disk_mb: int, hide: list[str], off: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """What the worker applies to itself (duck.sandbox.confine); `off`: layers left out."""
    return {"workdir": workdir, "uid": uid, "gid": uid, "memory_mb": memory_mb, "file_mb": file_mb,
            "open_files": open_files, "disk_mb": disk_mb, "read": python_paths(),
            "hide": sorted({os.path.realpath(h) for h in hide}), "off": sorted(off),
            "landlock": landlock.abi() >= 1 and "landlock" not in off}


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


# --- what outlived a call ----------------------------------------------------------------

def _status_field(pid: str, name: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1]
    except OSError:
        return None
    return None


def pids_of_uid(uid: int) -> list[int]:
    """Every process whose real uid is `uid` (/proc's owner can be changed by the process
    itself, PR_SET_DUMPABLE; the status line cannot)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            field = _status_field(name, "Uid:")
            if field and int(field.split()[0]) == uid:
                out.append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children that left the process group included)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        found += sorted(frontier)
    return found


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def end_uid(uid: int) -> int:
    """Kill every process of `uid`; returns how many there were."""
    pids = pids_of_uid(uid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


def leftovers(worker_pid: int, uid: int | None) -> list[int]:
    """Processes other than the worker that a call left behind."""
    if uid is not None:
        return [p for p in pids_of_uid(uid) if p != worker_pid]
    return descendants(worker_pid)


def dir_size(path: str, stop_at: int) -> int:
    """Bytes under `path` (as allocated), stopping early once past `stop_at`."""
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        pass
                    if total > stop_at:
                        return total
        except OSError:
            pass
    return total


record.HEADER_EXTRAS["sandbox"] = report  # every record header says which layers confine the kernel
