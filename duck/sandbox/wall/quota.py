"""The worker's disk use where no tmpfs bounds it (host side): bytes, inodes and folder depth of
its temp dir, the files a call's process holds open or mapped after deleting them, and what its
uid owns in the world-writable folders outside it; and removing a tree of any depth.

Without a mount namespace the temp dir is a plain folder on the host's disk: issue 30 found 900K
empty folders, an unlinked open file and hundreds of MB in /dev/shm uncounted; issue 37 a path
beyond PATH_MAX skipped, a deleted file kept by a memory map, /proc/<pid>/fd empty without
CAP_SYS_PTRACE. So `tree()` walks by descriptors (no path grows with the depth) and counts folders
deeper than MAX_DEPTH and anything unreadable as over (`Usage.unseen`, never a silent zero);
`unlinked_open_files()` reads /proc/<pid>/fd and maps, as the process's uid where the host lacks
CAP_SYS_PTRACE (`setfsuid`, per thread; each call's process is born dumpable), unseen where even
that fails; `remove_tree()` removes without recursion (989 nested folders raised RecursionError).
When it runs: duck.sandbox.wall.clock, and docs/sandbox.md.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

# World-writable folders any uid can fill (the temp dir itself lives in /tmp).
SHARED = ("/tmp", "/var/tmp", "/dev/shm")
MAX_DEPTH = 64  # folders nested deeper than this count as over the quota (model code needs a few)
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # removed or replaced while the walk ran
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Usage:
    bytes: int = 0
    inodes: int = 0
    unseen: str = ""  # what could not be counted: over any quota

    def add(self, other: "Usage") -> None:
        self.bytes += other.bytes
        self.inodes += other.inodes
        self.unseen = self.unseen or other.unseen

    def over(self, max_bytes: int, max_inodes: int) -> bool:
        return bool(self.unseen) or self.bytes > max_bytes or self.inodes > max_inodes


def tree(path: str, stop: Usage, on_dir: Callable[[int, str], None] | None = None) -> Usage:
    """Bytes (as allocated) and inodes under `path` (itself included), stopping early once past
    either of `stop`'s figures; an entry it cannot read or a folder deeper than MAX_DEPTH sets
    `unseen`. An entry removed while the walk runs is simply not counted. `on_dir(fd, path)`:
    each folder as it is entered (the quota's clock watches them: duck.sandbox.wall.clock)."""
    used = Usage()
    try:
        st = os.lstat(path)
        used.inodes, used.bytes = 1, st.st_blocks * 512
        if not stat.S_ISDIR(st.st_mode):
            return used
        fd = os.open(path, _DIR)
    except FileNotFoundError:
        return used
    except OSError as e:
        used.unseen = f"{path}: {e.strerror}"
        return used
    stack, names = [(fd, os.scandir(fd))], [path]
    if on_dir:
        on_dir(fd, path)
    try:
        while stack and not used.over(stop.bytes, stop.inodes):
            e = next(stack[-1][1], None)
            if e is None:
                stack[-1][1].close()
                os.close(stack.pop()[0])
                names.pop()
                continue
            try:
                st = e.stat(follow_symlinks=False)
                used.inodes, used.bytes = used.inodes + 1, used.bytes + st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    if len(stack) >= MAX_DEPTH:
                        used.unseen = f"folders nested deeper than {MAX_DEPTH}"
                        break
                    sub = os.open(e.name, _DIR, dir_fd=stack[-1][0])
                    stack.append((sub, os.scandir(sub)))
                    names.append(e.name)
                    if on_dir:
                        on_dir(sub, "/".join(names))
            except OSError as e:
                if e.errno not in _VANISHED:
                    raise
    except OSError as e:
        used.unseen = f"an entry under {path} could not be read ({e.strerror})"
    finally:
        for fd, it in stack:
            it.close()
            os.close(fd)
    return used


@contextmanager
def as_fs_uid(uid: int | None) -> Iterator[None]:
    """This thread's file-system uid and gid set to `uid` (the host's other threads keep
    theirs): /proc's checks then see the worker's owner, not a root without CAP_SYS_PTRACE."""
    if uid is None:
        yield
        return
    gid, old = _libc.setfsgid(uid), _libc.setfsuid(uid)
    try:
        yield
    finally:
        _libc.setfsuid(old)
        _libc.setfsgid(gid)


def _proc_fd(pid: int, uid: int | None) -> tuple[list[str] | None, int | None]:
    """The names in /proc/<pid>/fd (None: the process is gone) and the uid to read them as;
    PermissionError when neither root nor the worker's uid may follow them (root without
    CAP_SYS_PTRACE may list them, through its file capabilities, but not follow one)."""
    for as_uid in (None, uid) if uid is not None else (None,):
        try:
            with as_fs_uid(as_uid):
                fds = os.listdir(f"/proc/{pid}/fd")
                for fd in fds:  # listing is not following: one link must be read
                    try:
                        os.readlink(f"/proc/{pid}/fd/{fd}")
                        break
                    except FileNotFoundError:
                        continue  # closed since the listing
                return fds, as_uid
        except (FileNotFoundError, ProcessLookupError):
            return None, None
        except PermissionError:
            continue
    raise PermissionError(errno.EACCES, f"cannot read /proc/{pid}/fd (no CAP_SYS_PTRACE, and not as its uid)")


def fail_closed(layers: dict[str, str], pid: int, uid: int | None) -> dict[str, str]:
    """`layers` with its disk_quota line turned off where the host counts the worker's files
    but cannot read its /proc/<pid>/fd (`pid`: a confined worker or probe, `uid`: its own):
    then every check of the quota finds it over (unseen), and the record says why."""
    if layers.get("disk_quota", "").startswith("on: checked by the host"):
        try:
            _proc_fd(pid, uid)
        except PermissionError as e:
            return layers | {"disk_quota": f"off: {e.strerror}: every call would end over the quota"}
    return layers


def unlinked_open_files(pid: int, uid: int | None = None, file_bytes: int = 0, where: str = "") -> Usage:
    """Regular files `pid` holds open, or keeps mapped (in the shared folders or `where`), whose
    last name was removed (counted nowhere else). A mapped file whose size /proc does not give
    is charged `file_bytes` (the worker's RLIMIT_FSIZE: no file of its can be larger).
    Unreadable: `unseen`."""
    used, seen = Usage(), set()
    folders = tuple(d.rstrip("/") + "/" for d in (*SHARED, where) if d)
    try:
        fds, as_uid = _proc_fd(pid, uid)
    except PermissionError as e:
        used.unseen = e.strerror
        return used
    if fds is None:
        return used
    with as_fs_uid(as_uid):
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except PermissionError:
                used.unseen = f"cannot read /proc/{pid}/fd/{fd}"
                return used
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_ino not in seen:
                seen.add(st.st_ino)
                used.bytes, used.inodes = used.bytes + st.st_blocks * 512, used.inodes + 1
        try:
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read()
        except PermissionError:
            used.unseen = f"cannot read /proc/{pid}/maps"
            return used
        except OSError:
            maps = ""
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].endswith(" (deleted)") or parts[4] == "0" \
                    or not parts[5].startswith(folders) or int(parts[4]) in seen:
                continue
            seen.add(int(parts[4]))
            try:
                size = os.stat(f"/proc/{pid}/map_files/{parts[0]}").st_blocks * 512
            except OSError:
                size = file_bytes
            used.bytes, used.inodes = used.bytes + size, used.inodes + 1
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


def usage(workdir: str | None, uid: int | None, pid: int | None, stop: Usage, *, file_bytes: int = 0,
          fs_uid: int | None = None, on_dir: Callable[[int, str], None] | None = None) -> Usage:
    """Everything the worker's disk quota counts (`stop`: the quota, to end the walk early): the
    temp dir (None where a tmpfs bounds it), the worker's deleted open or mapped files (read as
    `fs_uid`, the worker's, where root may not), and what `uid` owns in the shared folders
    (None where Landlock closes them)."""
    used = tree(workdir, stop, on_dir) if workdir else Usage()
    if pid is not None and workdir:
        used.add(unlinked_open_files(pid, fs_uid, file_bytes, workdir))
    if uid is not None:
        for p in owned(uid, skip=workdir):
            if used.over(stop.bytes, stop.inodes):
                break
            used.add(tree(p, stop))
    return used


def remove_tree(path: str) -> None:
    """Delete `path` and everything under it, whatever its depth and names, never following a
    link, with two descriptors open at most: each subfolder's own subfolders are moved up into
    `path` (a rename within one file system), so nothing recurses and no path grows. Raises
    OSError if something is left."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
        top = os.open(path, _DIR)
    except FileNotFoundError:
        return
    n, before = 0, None
    try:
        while names := os.listdir(top):
            if names == before:  # nothing could be removed in a whole round
                raise OSError(errno.ENOTEMPTY, f"could not remove {len(names)} entries of {path}")
            before = names
            for name in names:
                try:
                    os.unlink(name, dir_fd=top)
                except IsADirectoryError:
                    try:
                        n = _empty_into(top, name, n)
                    except OSError:
                        pass  # tried again next round; a round without progress raises
                except FileNotFoundError:
                    pass
    finally:
        os.close(top)
    os.rmdir(path)


def _empty_into(top: int, name: str, n: int) -> int:
    """Remove folder `name` of `top`: its files deleted, its folders moved up into `top` under
    fresh names (n counts them), then itself. Returns the next fresh number."""
    sub = os.open(name, _DIR, dir_fd=top)
    try:
        for child in os.listdir(sub):
            try:
                os.unlink(child, dir_fd=sub)
            except IsADirectoryError:
                while True:
                    n += 1
                    try:
                        os.rename(child, f".duck-rm-{n}", src_dir_fd=sub, dst_dir_fd=top)
                        break
                    except OSError as e:
                        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                            raise
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=top)
    return n


def remove_owned(uid: int, skip: str | None = None) -> int:
    """Delete what `uid` owns in the shared folders (never following a link); returns how many
    entries were removed."""
    n = 0
    for p in owned(uid, skip=skip):
        try:
            remove_tree(p)
            n += 1
        except OSError:
            pass
    return n
