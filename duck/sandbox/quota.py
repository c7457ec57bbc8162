"""The worker's disk use where no tmpfs bounds it (host side): bytes and inodes of its temp
dir, of the files it holds open after deleting them, and of what its uid owns in the
world-writable folders outside it.

Why: without a mount namespace (root without CAP_SYS_ADMIN, as on Kaggle) the temp dir is a
plain folder on the host's disk. Measured by size alone it missed 900K empty folders (kernel
memory the data quota never counted; their cleanup took 155 s), an unlinked open file, and
hundreds of MB in /dev/shm and /tmp (issue 30). `usage()` counts all of these; `remove_owned()`
deletes what the worker's uid left outside its temp dir when the worker is ended.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass

# World-writable folders any uid can fill (the temp dir itself lives in /tmp).
SHARED = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass
class Usage:
    bytes: int = 0
    inodes: int = 0

    def add(self, other: "Usage") -> None:
        self.bytes += other.bytes
        self.inodes += other.inodes

    def over(self, max_bytes: int, max_inodes: int) -> bool:
        return self.bytes > max_bytes or self.inodes > max_inodes


def tree(path: str, stop: Usage) -> Usage:
    """Bytes (as allocated) and inodes under `path` (itself included), stopping early once
    past either of `stop`'s figures."""
    used = Usage()
    stack = [path]
    try:
        st = os.lstat(path)
    except OSError:
        return used
    used.inodes, used.bytes = 1, st.st_blocks * 512
    if not stat.S_ISDIR(st.st_mode):
        return used
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    used.inodes += 1
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        used.bytes += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        pass
                    if used.over(stop.bytes, stop.inodes):
                        return used
        except OSError:
            pass
    return used


def unlinked_open_files(pid: int) -> Usage:
    """Regular files `pid` holds open whose last name was removed (counted nowhere else)."""
    used = Usage()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return used
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
            used.bytes += st.st_blocks * 512
            used.inodes += 1
    return used


def owned(uid: int, skip: str | None = None) -> list[str]:
    """Entries of `uid` in the shared folders and in their world-writable subfolders (one level
    down: /tmp/.X11-unix and the like), except `skip` (the temp dir)."""
    found = []
    folders = list(SHARED)
    seen = set()
    while folders:
        folder = folders.pop()
        if folder in seen:
            continue
        seen.add(folder)
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.path == skip:
                    continue
                if st.st_uid == uid:
                    found.append(e.path)
                elif (stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002 and folder in SHARED):
                    folders.append(e.path)
    return found


def usage(workdir: str, uid: int | None, pid: int | None, stop: Usage) -> Usage:
    """Everything the worker's disk quota counts (`stop`: the quota, to end the walk early)."""
    used = tree(workdir, stop)
    if pid is not None:
        used.add(unlinked_open_files(pid))
    if uid is not None:
        for p in owned(uid, skip=workdir):
            if used.over(stop.bytes, stop.inodes):
                break
            used.add(tree(p, stop))
    return used


def remove_owned(uid: int, skip: str | None = None) -> int:
    """Delete what `uid` owns in the shared folders (never following a link); returns how many
    entries were removed."""
    n = 0
    for p in owned(uid, skip=skip):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
            n += 1
        except OSError:
            pass
    return n
