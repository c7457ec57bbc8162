"""The disk quota's clock while a call runs, where no tmpfs bounds the temp dir (host side, issue 48).

A walk every 0.5 s could be timed and dodged (inotify showed it coming; a slow folder held it
while 480 MB moved out of its way and back) and cost 70-98 ms a walk at 15,000 files, frozen
worker or not. Now no process runs between calls (duck.sandbox.call), the worker has no inotify
(seccomp), and during a call the host's own inotify watches of its folders count what it
creates and writes (no other process's files can hide it; a new folder is watched, then looked
into): a walk, with the call's process stopped (SIGSTOP: nothing moves while it is counted),
when that count may pass the quota, when statfs says the file system lost more than the quota
(deleted open files live there), else every WALK_MIN_S to WALK_MAX_S (the further below the
quota, the longer). Past it the process is killed: it holds at most the quota plus what it
creates before the host's thread wakes to its events.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import struct
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from duck.sandbox.wall.quota import Usage

POLL_S = 0.25  # the longest the clock sleeps between looks at statfs (its watches wake it at once)
WALK_MIN_S, WALK_MAX_S = 0.5, 5.0  # a walk at least this often near the quota, and far below it
STOP_WAIT_S = 1.0  # how long the host waits to see the call's process stopped
# inotify: what changes a folder's content (created, deleted, moved, written, its own removal)
IN_MODIFY, IN_CLOSE_WRITE, IN_CREATE, IN_Q_OVERFLOW, IN_ISDIR = 0x2, 0x8, 0x100, 0x4000, 0x40000000
_WATCH = IN_MODIFY | 0x4 | IN_CLOSE_WRITE | 0x40 | 0x80 | IN_CREATE | 0x200 | 0x400 | 0x800
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name)
_libc = ctypes.CDLL(None, use_errno=True)


def taken(paths: list[str]) -> int:
    """Bytes in use on the distinct file systems of `paths` (each counted once)."""
    seen, used = set(), 0
    for p in paths:
        try:
            dev, st = os.stat(p).st_dev, os.statvfs(p)
        except OSError:
            continue
        if dev not in seen:
            seen.add(dev)
            used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return used


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


@contextmanager
def stopped(pid: int, pidfd: int) -> Iterator[None]:
    """The process stopped (every thread; it cannot block SIGSTOP) for as long as the block runs."""
    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    try:
        end = time.monotonic() + STOP_WAIT_S
        while _state(pid) not in ("T", "t", "", "Z", "X") and time.monotonic() < end:
            time.sleep(0.0002)
        yield
    finally:
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)


class Watches:
    """One inotify instance for a worker's temp dir, kept across its calls (closing one with
    watches costs ~10 ms: the kernel waits for a grace period) and `close()`d with the worker."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)  # -1: none (then walks every POLL_S)
        self.dirs: dict[int, str] = {}  # watch -> its folder's path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Clock:
    """Watches one call's process: `walk(on_dir)` counts its disk use (duck.sandbox.wall.quota,
    calling `on_dir(fd, path)` per folder), `limit` is the quota, `paths` where it writes, `watches`
    the worker's. `hit`: why it was killed (None while under); `walks`: how many walks it made."""

    def __init__(self, walk: Callable[[Callable[[int, str], None] | None], Usage], limit: Usage,
                 paths: list[str], pid: int, pidfd: int, file_bytes: int, watches: Watches) -> None:
        self.walk, self.limit, self.paths, self.pid, self.pidfd = walk, limit, paths, pid, pidfd
        self.file_bytes = file_bytes  # the most one file can hold (RLIMIT_FSIZE)
        self.used = Usage()
        self.hit: str | None = None
        self.walks = 0
        self._stop = threading.Event()
        self._wake = os.pipe()  # stop() wakes the thread at once
        self._thread = threading.Thread(target=self._run, name="kernel-quota", daemon=True)
        self._ino, self._dirs = watches.fd, watches.dirs
        self._reset()

    def _reset(self) -> None:
        """Nothing seen since the last walk."""
        self._created, self._written = 0, set()

    def start(self) -> None:
        self._base = taken(self.paths)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        os.write(self._wake[1], b"x")
        if self._thread.ident is not None:
            self._thread.join()
        for fd in self._wake:
            os.close(fd)

    def _watch(self, fd: int | None, path: str) -> bool:
        """Watch a folder (by its open fd, or its path); False (and walks every POLL_S) if it cannot be."""
        wd = _libc.inotify_add_watch(self._ino, (f"/proc/self/fd/{fd}" if fd is not None else path).encode(),
                                     _WATCH)
        if wd < 0:  # the watches are used up, a path too long
            self._blind = True
            return False
        self._dirs[wd] = path
        return True

    def _new_folder(self, path: str) -> None:
        """A folder created since the walk: watched, then what it holds already counted (as created,
        and each file as written); its folders likewise. No process stops for it."""
        todo = [path]
        while todo and not self._blind:
            folder = todo.pop()
            if not self._watch(None, folder):
                return
            try:
                with os.scandir(folder) as it:
                    for e in it:
                        self._created += 1
                        if e.is_dir(follow_symlinks=False):
                            todo.append(e.path)
                        else:
                            self._written.add(e.path)
            except OSError:
                pass  # gone again (or unreadable: then the next walk says so)

    def _gap(self) -> float:
        u = max(self.used.bytes / max(1, self.limit.bytes), self.used.inodes / max(1, self.limit.inodes), 0.0)
        return WALK_MIN_S + (WALK_MAX_S - WALK_MIN_S) * max(0.0, 1.0 - u) ** 2

    def _count(self) -> bool:
        """Walk with the process stopped, watching each folder; False (and it is killed) past the quota."""
        self._blind = self._ino < 0  # (a folder without a watch: walks every POLL_S)
        with stopped(self.pid, self.pidfd):
            self.used, self.walks = self.walk(self._watch if self._ino >= 0 else None), self.walks + 1
            self._base = taken(self.paths)
            self._events(0.0)  # (what it did before it stopped: counted by this walk)
            self._reset()
            if self.used.over(self.limit.bytes, self.limit.inodes):
                self.hit = (f"{self.used.inodes} files and {self.used.bytes >> 20} MB counted"
                            + (f"; {self.used.unseen}" if self.used.unseen else ""))
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                return False
        self._next = time.monotonic() + self._gap()
        return True

    def _events(self, wait: float) -> None:
        """Take what the watches saw within `wait` seconds (one read: a flood is judged as it comes):
        files and folders created, files written; new folders are watched unless a walk is due."""
        ready = select.select([fd for fd in (self._ino, self._wake[0]) if fd >= 0], [], [], wait)[0]
        if self._ino not in ready:
            return
        try:
            data = os.read(self._ino, 1 << 16)
        except BlockingIOError:
            return
        at, folders = 0, []
        while at + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, at)
            raw, at = data[at + _EVENT.size:at + _EVENT.size + size], at + _EVENT.size + size
            path = os.path.join(self._dirs.get(wd, "?"), os.fsdecode(raw.rstrip(b"\0")))
            if mask & IN_Q_OVERFLOW or wd not in self._dirs:
                self._blind = True
            elif mask & IN_CREATE and mask & IN_ISDIR:
                self._created += 1
                folders.append(path)
            elif mask & (IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE):
                self._created += bool(mask & IN_CREATE)
                self._written.add(path)
        if self.used.inodes + self._created <= self.limit.inodes:  # (else the walk watches them)
            for path in folders:
                self._new_folder(path)

    def _due(self) -> bool:
        """Whether what was seen since the last walk could pass the quota, or a walk is due anyway."""
        now = time.monotonic()
        grew = taken(self.paths) - self._base  # (its deleted open files; another process's files blur it)
        return (self._blind or now >= self._next or self.used.inodes + self._created > self.limit.inodes
                or self.used.bytes + max(grew, len(self._written) * self.file_bytes) > self.limit.bytes)

    def _run(self) -> None:
        try:
            if not self._count():
                return
            while not self._stop.is_set():
                self._events(max(0.0, min(POLL_S, self._next - time.monotonic())))
                if not self._stop.is_set() and self._due() and not self._count():
                    return
        except OSError:
            pass  # the process is gone: the call sees it
