"""Landlock (Linux >= 5.13): a file-system allow-list the worker cannot lift, by three syscalls.

No maintained Python binding of Landlock exists that we would trust more than these ~100
lines (the kernel ABI is three syscalls and two small structs, documented in
Documentation/userspace-api/landlock.rst), so this module calls them through ctypes.

`abi()` is the kernel's Landlock ABI version (0: absent or disabled). `restrict(read, write)`
confines the calling process and its future children for good: reads (and executes) only
beneath the `read` paths, anything beneath the `write` paths; with ABI >= 4 no TCP bind or
connect at all; with ABI >= 6 no signals to processes outside the domain and no abstract
unix sockets outside it. It needs no_new_privs or CAP_SYS_ADMIN (the worker has one of them).
"""

from __future__ import annotations

import ctypes
import os
from typing import Iterable

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # x86-64 and aarch64 share these numbers
_VERSION = 1 << 0  # landlock_create_ruleset flag: return the ABI version
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when the kernel lacks it or it is disabled."""
    try:
        v = _libc.syscall(ctypes.c_long(_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except Exception:  # noqa: BLE001 - no syscall() in this libc
        return 0
    return int(v) if v > 0 else 0


class LandlockError(OSError):
    pass


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock {what}: {os.strerror(err)}")
    return ret


def restrict(read: Iterable[str], write: Iterable[str], *, rw_files: Iterable[str] = ()) -> int:
    """Confine this process (and its future children) for good; returns the ABI used.
    `read`: read and execute beneath; `write`: everything beneath; `rw_files`: single files
    (e.g. /dev/null) readable and writable. Paths that do not exist are skipped."""
    version = abi()
    if version < 1:
        raise LandlockError(0, "landlock is not available on this kernel")
    fs = _fs_rights(version)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if version >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else (16 if version >= 4 else 8)
    rfd = _check(_libc.syscall(ctypes.c_long(_CREATE), ctypes.byref(attr), ctypes.c_size_t(size),
                               ctypes.c_uint32(0)), "create_ruleset")
    try:
        ro = EXECUTE | READ_FILE | READ_DIR
        rules = [(p, ro) for p in read] + [(p, fs) for p in write] + \
            [(p, READ_FILE | WRITE_FILE | (TRUNCATE if version >= 3 else 0)) for p in rw_files]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= _FILE_RIGHTS
                rule = _PathBeneath(rights, fd)
                _check(_libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(rfd), ctypes.c_int(_RULE_PATH_BENEATH),
                                     ctypes.byref(rule), ctypes.c_uint32(0)), f"add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.syscall(ctypes.c_long(_RESTRICT), ctypes.c_int(rfd), ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(rfd)
    return version
