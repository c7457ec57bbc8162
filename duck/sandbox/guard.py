"""The kernel worker's in-process fences: clear messages for what model code may not do.

These run inside the interpreter they police, so deliberate code can reach them (the guard
object through `gc`, `sys.modules`, the loaded ctypes): they are not the wall. The wall is
the operating system (duck.sandbox.wall.confine: its own uid, Landlock, seccomp, namespaces, hard
limits). What stays here tells a careless model at once, in words, why something failed:

* an audit hook (`Guard`) refusing new processes, signals to other processes, sockets,
  ctypes, and any write, rename or delete outside the kernel's temp directory; reads of
  the games' source folders are refused too (no peeking at the rules);
* `import` at snippet level (`kernel_import`, the `__import__` of the namespace's builtins,
  `namespace_builtins`): everything but process, thread, network and host modules (numpy and
  the standard library work).
"""

from __future__ import annotations

import builtins
import os
from typing import Any

# Refused at snippet level in our namespace: processes, threads, network, host access.
REFUSED_MODULES = {"subprocess", "multiprocessing", "socket", "ssl", "ctypes", "threading",
                   "_thread", "asyncio", "concurrent", "signal", "pty", "http", "urllib",
                   "ftplib", "smtplib", "select", "selectors", "mmap", "resource", "duck",
                   "arc_agi", "arcengine", "requests", "openai", "importlib", "_posixsubprocess"}
_BLOCKED_EVENTS = {"os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "socket.connect", "socket.bind",
                   "socket.__new__", "ctypes.dlopen", "os.setuid"}
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree"}


GUARD = "on: in-process audit hook (clear messages only, not a wall)"  # its line in the layer report


class Guard:
    """The audit hook (installed once; audit hooks cannot be removed)."""

    def __init__(self, workdir: str, deny_read: list[str]) -> None:
        self.workdir = os.path.realpath(workdir)
        self.deny_read = [os.path.realpath(p) for p in deny_read]
        self.forking = False  # the worker forking a call's process (duck.sandbox.worker; seccomp denies it there)

    def __call__(self, event: str, args: tuple) -> None:
        if event in _BLOCKED_EVENTS and not (self.forking and event == "os.fork"):
            raise PermissionError(f"{event} is not allowed in the kernel")
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int) or path is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            self.check_path(os.fsdecode(path), writing)
        elif event in _PATH_EVENTS:
            for p in args[:2]:
                if isinstance(p, (str, bytes, os.PathLike)):
                    self.check_path(os.fsdecode(p), True)

    def check_path(self, path: str, writing: bool) -> None:
        real = os.path.realpath(path)
        if writing:
            if real != os.devnull and not (real + os.sep).startswith(self.workdir + os.sep):
                raise PermissionError(f"writing outside the kernel's working directory is not "
                                      f"allowed: {path}")
        elif any((real + os.sep).startswith(d + os.sep) for d in self.deny_read):
            raise PermissionError(f"reading {path} is not allowed in the kernel")


def kernel_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                  level: int = 0) -> Any:
    if str(name or "").split(".", 1)[0] in REFUSED_MODULES:
        raise ImportError(f"Module '{name}' is not available in the kernel (no processes, "
                          "threads, network or host access); numpy and the rest of the "
                          "standard library are.")
    return builtins.__import__(name, globals, locals, fromlist, level)


def namespace_builtins() -> dict[str, Any]:
    """The model namespace's `__builtins__`: all of them, with `kernel_import` as `__import__`."""
    return dict(builtins.__dict__) | {"__import__": kernel_import}
