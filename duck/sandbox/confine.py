"""The worker confining itself at start-up, before it reads any model code (worker side).

The host starts the worker as its own user (root on Kaggle and in CI) with a plan
(`duck.sandbox.isolation.plan`); `confine(plan)` applies, in this order, every layer the
machine allows and returns what it applied, layer by layer ("on ..." or "off: why"):

1. namespaces (root only): a network namespace (no interface but a down loopback) and a
   private mount namespace, in which a small tmpfs is mounted on the temp dir (the disk
   quota), empty read-only tmpfs hide the games folders and the run's records, and the
   Python installation is re-exposed when one of its parent folders is closed to other
   users (pyenv under /root: a tmpfs on /root holding only the bind-mounted .pyenv);
2. Landlock: reads only beneath the Python installation and the system libraries, writes
   only beneath the temp dir (and /dev/null); no TCP; no signals outside the sandbox;
3. hard resource limits (address space, file size, open files, no core files; one process
   for the worker's uid: no thread, no child), set while still privileged;
4. the drop to the worker's own unprivileged uid and gid (no supplementary groups), checked;
5. the seccomp filter (`duck.sandbox.seccomp_filter`), which also sets no_new_privs.

Nothing here trusts the model: it has not run yet. A layer that cannot be applied is reported,
never silently skipped; the host compares the result with its plan.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from typing import Any

from duck.sandbox import landlock

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)

# Beside the Python installation, what a running interpreter reads: shared libraries (a
# lazily imported extension module links them), the time zone, the CPU count, randomness.
SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32", "/usr/share/zoneinfo",
               "/etc/localtime", "/etc/ld.so.cache", "/sys/devices/system/cpu/online",
               "/dev/urandom", "/dev/random", "/dev/zero")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _within(path: str, root: str) -> bool:
    return (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")


def closed_ancestor(path: str) -> str | None:
    """The highest parent folder of `path` that other users cannot traverse (no o+x)."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        parent = "/" + "/".join(parts[:i])
        try:
            if not os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            return None
    return None


def _expose(paths: list[str], staging: str) -> list[str]:
    """Make `paths` reachable for another uid in this mount namespace, keeping their names:
    over each closed parent a tmpfs holding only bind mounts of what is needed below it."""
    groups: dict[str, set[str]] = {}
    for p in paths:
        top = closed_ancestor(p)
        if top:
            groups.setdefault(top, set()).add(p[len(top):].strip("/").split("/")[0])
    for top, names in groups.items():
        staged = []
        for i, name in enumerate(sorted(names)):
            s = os.path.join(staging, f".stage-{i}")
            os.mkdir(s)
            _mount(os.path.join(top, name), s, None, MS_BIND | MS_REC)
            staged.append((name, s))
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for name, s in staged:
            os.mkdir(os.path.join(top, name), 0o755)
            _mount(s, os.path.join(top, name), None, MS_MOVE)
            os.rmdir(s)
        _mount(None, top, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return sorted(groups)


def _namespaces(plan: dict[str, Any], layers: dict[str, str]) -> bool:
    """Network and mount namespaces; returns whether the mount namespace is ours."""
    try:
        os.unshare(os.CLONE_NEWNET)
        layers["network"] = "on: network namespace (no interface)"
    except (OSError, AttributeError) as e:
        layers["network"] = f"off: no network namespace ({e})"
    try:
        os.unshare(os.CLONE_NEWNS)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    except (OSError, AttributeError) as e:
        layers["mounts"] = f"off: no mount namespace ({e})"
        return False
    workdir, uid = plan["workdir"], plan.get("uid")
    owner = f",uid={uid},gid={plan['gid']}" if uid is not None else ""
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"size={int(plan['disk_mb'])}m,mode=0700{owner}")
    os.chdir(workdir)
    layers["disk_quota"] = f"on: tmpfs of {int(plan['disk_mb'])} MB on the temp dir"
    hidden = []
    for p in plan.get("hide", []):
        if os.path.isdir(p) and not any(_within(r, p) for r in plan["read"]) and not _within(workdir, p):
            _mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
            hidden.append(p)
    exposed = _expose(plan["read"], workdir) if uid is not None else []
    layers["mounts"] = (f"on: private mount namespace; hidden {len(hidden)} folder(s)"
                        + (f"; Python re-exposed under {', '.join(exposed)}" if exposed else ""))
    return True


def set_limits(plan: dict[str, Any], one_process: bool) -> str:
    mb = 1 << 20
    limits = [(resource.RLIMIT_AS, int(plan.get("memory_mb", 2048)) * mb),
              (resource.RLIMIT_FSIZE, int(plan.get("file_mb", 16)) * mb),
              (resource.RLIMIT_NOFILE, int(plan.get("open_files", 64))),
              (resource.RLIMIT_CORE, 0)]
    if one_process:
        limits.append((resource.RLIMIT_NPROC, 1))
    failed = []
    for lim, value in limits:
        try:
            resource.setrlimit(lim, (value, value))
        except (ValueError, OSError):
            failed.append(str(lim))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large file fails, not the kernel
    what = "address space, file size, open files, core" + (", one process" if one_process else "")
    return f"on: hard {what}" if not failed else f"partly: could not set {', '.join(failed)}"


def _drop(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError("the uid did not change")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise OSError("root could be regained after the drop")


def _import_pyseccomp() -> None:
    """Import the binding. It looks libseccomp up with ctypes.util.find_library, which runs
    `ldconfig -p` in a subprocess (~30 ms of every worker start); the sonames are known, so
    they are tried first and the lookup is used only if that fails."""
    import ctypes.util

    real = ctypes.util.find_library

    def find(name: str) -> str | None:
        soname = {"seccomp": "libseccomp.so.2", "c": "libc.so.6"}.get(name)
        if soname:
            try:
                ctypes.CDLL(soname)
                return soname
            except OSError:
                pass
        return real(name)

    ctypes.util.find_library = find
    try:
        import pyseccomp  # noqa: F401
    finally:
        ctypes.util.find_library = real


def confine(plan: dict[str, Any]) -> dict[str, str]:
    """Apply the plan's layers to this process, in order; returns what was applied."""
    layers: dict[str, str] = {}
    try:  # before any file-system rule: the binding finds and loads libseccomp
        from duck.sandbox import seccomp_filter
        _import_pyseccomp()
        seccomp_error = None
    except (ImportError, OSError, AttributeError, TypeError) as e:
        seccomp_error = f"{type(e).__name__}: {e}"
    root = os.geteuid() == 0
    uid = plan.get("uid")
    off = set(plan.get("off", ()))
    mounts = False
    if root and "namespaces" not in off:
        mounts = _namespaces(plan, layers)
    else:
        layers["network"] = layers["mounts"] = "off: " + ("not root (no namespaces)" if not root else "turned off")
    if not mounts:
        layers["disk_quota"] = "on: the host checks the temp dir's size after each message"
    if plan.get("landlock", True):
        try:
            if not root:
                _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            abi = landlock.restrict([*plan["read"], *SYSTEM_READ], [plan["workdir"]], rw_files=["/dev/null"])
            layers["filesystem"] = (f"on: landlock ABI {abi} (read: Python and system libraries; write: "
                                    f"the temp dir){'; no TCP' if abi >= 4 else ''}"
                                    f"{'; no signals outside' if abi >= 6 else ''}")
        except OSError as e:
            layers["filesystem"] = f"off: {e}"
    else:
        layers["filesystem"] = "off: " + ("turned off" if "landlock" in off else "no landlock on this kernel")
    closed = [p for p in plan["read"] if closed_ancestor(p)] if uid is not None and not mounts else []
    if closed:  # the dropped uid could not even import the standard library
        uid = None
        layers["uid"] = (f"off: the Python installation ({closed[0]}) is closed to other users and "
                         "no mount namespace can re-expose it")
    layers["limits"] = set_limits(plan, one_process=uid is not None and root)
    if uid is not None and root:
        _drop(uid, int(plan["gid"]))  # an error here is fatal: the host sees no `ready`
        layers["uid"] = f"on: uid {uid}, gid {plan['gid']}, no groups"
    elif "uid" not in layers:
        layers["uid"] = "off: " + ("not root" if not root else "turned off")
    if "seccomp" in off:
        layers["seccomp"] = "off: turned off"
    elif seccomp_error is None:
        try:
            layers["seccomp"] = f"on: {seccomp_filter.load()} rules (libseccomp)"
        except OSError as e:
            layers["seccomp"] = f"off: {e}"
    else:
        layers["seccomp"] = f"off: {seccomp_error}"
    if "network" in layers and layers["network"].startswith("off") and layers["seccomp"].startswith("on"):
        layers["network"] = "on: seccomp allows AF_UNIX sockets only"
    return layers
