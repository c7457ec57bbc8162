"""Probes the worker runs on itself right after each layer is applied (worker side): a layer is
reported "on" only when a probe that must fail did fail, or a kernel interface confirms it.

Why: Landlock once failed with EPERM as root without CAP_SYS_ADMIN (no no_new_privs) while the
record header said "on", and three attacks read the games (issue 30). So nothing here trusts a
return code alone: each function answers None when the layer holds, else what was wrong, in
a few words for the layer's "off: ..." line.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from typing import Any

PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS = 21, 39
SECCOMP_MODE_FILTER = 2

_libc = ctypes.CDLL(None, use_errno=True)


def ns_id(kind: str) -> int | None:
    """The inode of this process's namespace of `kind` (net, ipc, mnt); None if unreadable."""
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def namespace(kind: str, before: int | None) -> str | None:
    now = ns_id(kind)
    if before is None or now is None:
        return f"cannot read /proc/self/ns/{kind}"
    return None if now != before else f"still in the host's {kind} namespace"


def network_empty() -> str | None:
    """In a fresh network namespace the only interface is a loopback that is down."""
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError as e:
        return f"cannot list interfaces ({e})"
    if names != ["lo"]:
        return f"interfaces {names}"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(1)
        s.connect(("127.0.0.1", 9))
        return "127.0.0.1 answered"
    except OSError:
        return None
    finally:
        s.close()


def tmpfs(path: str, mb: int, inodes: int) -> str | None:
    st = os.statvfs(path)
    size, files = st.f_blocks * st.f_frsize, st.f_files
    if abs(size - (mb << 20)) > 1 << 20 or files != inodes:
        return f"{path} holds {size >> 20} MB and {files} inodes, not {mb} MB and {inodes}"
    return None


def empty_or_closed(path: str) -> str | None:
    """A folder hidden from the worker: empty (a tmpfs over it) or not readable at all."""
    try:
        names = os.listdir(path)
    except OSError:
        return None
    return f"{path} is readable ({len(names)} entries)" if names else None


def closed(path: str) -> str | None:
    """`path` cannot be opened (or listed) by this process."""
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            os.close(os.open(path, os.O_RDONLY))
    except PermissionError:
        return None
    except FileNotFoundError:
        return None  # nothing there to read
    except OSError as e:
        return None if e.errno in (errno.EACCES, errno.EPERM) else f"{path}: {e}"
    return f"{path} is readable"


def hidepid(host_pid: int) -> str | None:
    """/proc does not show the host (another uid's process) to this process."""
    return f"/proc/{host_pid} is visible" if os.path.exists(f"/proc/{host_pid}") else None


def uid(expected: int, gid: int) -> str | None:
    if os.getresuid() != (expected, expected, expected) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        return f"uid {os.getresuid()}, gid {os.getresgid()}, groups {os.getgroups()}"
    try:
        os.setuid(0)
    except PermissionError:
        return None
    return "root could be regained"


def no_new_privs() -> str | None:
    return None if _libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 else "no_new_privs is not set"


def landlock(workdir: str) -> str | None:
    """Reads outside the allowed paths fail; writes in the temp dir work."""
    err = closed("/") or closed("/proc/self/status")
    if err:
        return err
    probe = os.path.join(workdir, ".landlock-probe")
    try:
        with open(probe, "w") as f:
            f.write("x")
        os.unlink(probe)
    except OSError as e:
        return f"the temp dir cannot be written ({e})"
    return None


def seccomp() -> str | None:
    """The filter is loaded (the kernel says so) and a denied syscall fails with EPERM."""
    if _libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != SECCOMP_MODE_FILTER:
        return "no filter is loaded"
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except PermissionError:
        return None
    return "socket() was allowed"


def cgroup(procs_file: str, limit_file: str, limit: int) -> str | None:
    """This process sits in the planned cgroup, whose limit is the planned one."""
    folder = os.path.dirname(procs_file)
    try:
        with open(procs_file) as f:
            members = {int(x) for x in f.read().split()}
        with open(limit_file) as f:
            got = f.read().strip()
    except (OSError, ValueError) as e:
        return f"cannot read {folder} ({e})"
    if os.getpid() not in members:
        return f"not a member of {folder}"
    if got != str(limit):
        return f"{limit_file} says {got}, not {limit}"
    return None


def summary(checks: dict[str, Any]) -> str | None:
    """The first failed check of several, as "name: why"."""
    for name, err in checks.items():
        if err:
            return f"{name}: {err}"
    return None
