"""A memory cgroup per worker, where the host can make one (host side).

Why: the worker's rlimits bound its address space, not what the kernel holds on its behalf
(page cache, tmpfs pages, kernel objects); in a 1.5 GB cgroup shared with the host, an attack
once got the host OOM-killed (issue 30). A cgroup of its own makes the worker the one killed.

Where: cgroup v2 when the host's own cgroup is writable and delegates the memory controller
to its children (`memory` already in its cgroup.subtree_control: a delegated subtree, a
container's root cgroup; the host never enables a controller itself); else cgroup v1's memory hierarchy when it is mounted
writable (no delegation rule there). Neither on Kaggle's unprivileged container: the layer is
then reported off with the reason. The worker joins its cgroup itself, while still root
(duck.sandbox.wall.confine), and verifies it is a member and the limit is the planned one.

`make(limit_bytes)` -> (plan entry, None) or (None, why not); `remove(entry)` after the worker
is dead. Folders are named `duck-<host pid>-<n>`; a folder left by a host that died is removed
by the next `make` beside it.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from typing import Any

_seq = itertools.count()
_NAME = re.compile(r"^duck-(\d+)-\d+$")


def _mounts() -> tuple[str | None, str | None]:
    """Mount points of cgroup v2 and of cgroup v1's memory hierarchy (each None if absent)."""
    v2 = v1 = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if len(fields) < 5 or len(rest) < 3:
                    continue
                if rest[0] == "cgroup2" and v2 is None:
                    v2 = (fields[4], fields[3])
                elif rest[0] == "cgroup" and "memory" in rest[2].split(",") and v1 is None:
                    v1 = (fields[4], fields[3])
    except OSError:
        return None, None
    return _own(v2, "0::"), _own(v1, "memory")


def _own(mount: tuple[str, str] | None, key: str) -> str | None:
    """The folder of this process's cgroup in the hierarchy mounted at `mount`."""
    if mount is None:
        return None
    point, root = mount
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and ((key == "0::" and parts[0] == "0" and parts[1] == "")
                                        or key in parts[1].split(",")):
                    path = parts[2]
                    if root != "/" and path.startswith(root):
                        path = path[len(root):]
                    return os.path.join(point, path.lstrip("/"))
    except OSError:
        return None
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _sweep(parent: str) -> None:
    """Remove the empty folders of hosts that died."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = _NAME.match(name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def _v2(parent: str, limit: int) -> dict[str, Any]:
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        if "memory" not in f.read().split():  # never enabled here: that would change the machine
            raise OSError(0, "the memory controller is not delegated to its children")
    folder = os.path.join(parent, f"duck-{os.getpid()}-{next(_seq)}")
    os.mkdir(folder)
    try:
        _write(os.path.join(folder, "memory.max"), str(limit))
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            if os.path.exists(os.path.join(folder, name)):
                _write(os.path.join(folder, name), value)
    except OSError:
        os.rmdir(folder)
        raise
    return {"dir": folder, "procs": os.path.join(folder, "cgroup.procs"),
            "limit_file": os.path.join(folder, "memory.max"), "limit": limit, "version": "cgroup v2"}


def _v1(parent: str, limit: int) -> dict[str, Any]:
    folder = os.path.join(parent, f"duck-{os.getpid()}-{next(_seq)}")
    os.mkdir(folder)
    limit_file = os.path.join(folder, "memory.limit_in_bytes")
    try:
        _write(limit_file, str(limit))
        with open(limit_file) as f:  # v1 rounds the limit to whole pages
            limit = int(f.read())
        if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):
            _write(os.path.join(folder, "memory.memsw.limit_in_bytes"), str(limit))  # no swap beyond it
    except OSError:
        os.rmdir(folder)
        raise
    return {"dir": folder, "procs": os.path.join(folder, "cgroup.procs"), "limit_file": limit_file,
            "limit": limit, "version": "cgroup v1"}


def make(limit: int) -> tuple[dict[str, Any] | None, str | None]:
    """A fresh memory cgroup of `limit` bytes for one worker, or why none can be made here."""
    if os.geteuid() != 0:
        return None, "not root"
    v2, v1 = _mounts()
    why = []
    for parent, build, name in ((v2, _v2, "cgroup v2"), (v1, _v1, "cgroup v1 memory")):
        if parent is None:
            why.append(f"no {name}")
            continue
        _sweep(parent)
        try:
            return build(parent, limit), None
        except OSError as e:
            why.append(f"{name} at {parent}: {e.strerror or e}")
    return None, "; ".join(why)


def remove(entry: dict[str, Any] | None) -> None:
    """Remove a worker's cgroup once its processes are gone (a few tries: the kernel frees
    a killed task's membership shortly after the wait)."""
    if not entry:
        return
    for _ in range(50):
        try:
            os.rmdir(entry["dir"])
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
