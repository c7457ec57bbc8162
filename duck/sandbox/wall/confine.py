"""The worker confining itself at start-up, before it reads any model code (worker side).

`confine(plan)` applies, in this order, every layer the machine allows (the plan came over the
pipe: duck.sandbox.wall.isolation.plan) and returns what it verified, layer by layer ("on ..." or
"off: why"): the memory cgroup the host made, joined while root; namespaces: network, IPC and a
private mount namespace with a tmpfs of the quota's size and inodes on the temp dir, the games,
the run folder, /dev/shm, /dev/mqueue and /var/tmp hidden, /proc with hidepid and the Python
installation re-exposed where its parent is closed (as root with CAP_SYS_ADMIN, or without it in
a user namespace of its own whose id maps the host writes, issue 48); hard limits, set while
privileged; the drop to its own uid, checked, then the file modes; no_new_privs, always; Landlock
(reads: Python and the system libraries; writes: the temp dir); the seccomp filter's worker part.
Each layer is verified right after it is applied (duck.sandbox.wall.verify) and only a verified
layer is reported on; one that cannot be applied is reported, never skipped. The threat model:
docs/sandbox.md.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from typing import Any, Callable

from duck.sandbox.wall import landlock, verify

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

_libc = ctypes.CDLL(None, use_errno=True)

# Beside the Python installation, what a running interpreter reads: shared libraries (a
# lazily imported extension module links them), the time zone, the CPU count, randomness.
SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32", "/usr/share/zoneinfo",
               "/etc/localtime", "/etc/ld.so.cache", "/sys/devices/system/cpu/online",
               "/dev/urandom", "/dev/random", "/dev/zero")
NPROC = 16  # processes of the worker's uid (see set_limits)
# World-writable places outside the temp dir whose use no quota would count: closed under an
# empty read-only tmpfs in the mount namespace (/tmp holds the temp dir: the host counts it).
SHARED_WRITABLE = ("/dev/shm", "/dev/mqueue", "/var/tmp")


def prctl(option: int, arg: int = 0) -> int:
    """prctl(2) through the libc loaded before the guard (which refuses ctypes.dlopen after)."""
    return _libc.prctl(option, arg, 0, 0, 0)


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


def _hide(path: str) -> None:
    _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")


def _namespaces(plan: dict[str, Any], layers: dict[str, str]) -> bool:
    """Network, IPC and mount namespaces; returns whether the mount namespace is ours."""
    ids = {k: verify.ns_id(k) for k in ("net", "ipc", "mnt")}
    try:
        os.unshare(os.CLONE_NEWNET)
        err = verify.namespace("net", ids["net"]) or verify.network_empty()
        layers["network"] = "on: network namespace (no interface)" if err is None else f"off: {err}"
    except (OSError, AttributeError) as e:
        layers["network"] = f"off: no network namespace ({e})"
    try:
        os.unshare(os.CLONE_NEWIPC)
        err = verify.namespace("ipc", ids["ipc"])
        layers["ipc"] = "on: IPC namespace" if err is None else f"off: {err}"
    except (OSError, AttributeError) as e:
        layers["ipc"] = f"off: no IPC namespace ({e})"
    try:
        os.unshare(os.CLONE_NEWNS)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    except (OSError, AttributeError) as e:
        layers["mounts"] = f"off: no mount namespace ({e})"
        return False
    workdir, uid = plan["workdir"], plan.get("uid")
    owner = f",uid={uid},gid={plan['gid']}" if uid is not None else ""
    mb, inodes = int(plan["disk_mb"]), int(plan["disk_inodes"])
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"size={mb}m,nr_inodes={inodes},mode=0700{owner}")
    os.chdir(workdir)
    err = verify.tmpfs(workdir, mb, inodes)
    layers["disk_quota"] = (f"on: tmpfs of {mb} MB and {inodes} inodes on the temp dir" if err is None
                            else f"off: {err}")
    hidden = []
    for p in [*plan.get("hide", []), *SHARED_WRITABLE]:
        if os.path.isdir(p) and not any(_within(r, p) for r in plan["read"]) and not _within(workdir, p):
            _hide(p)
            hidden.append(p)
    err = verify.namespace("mnt", ids["mnt"]) or verify.summary({p: verify.empty_or_closed(p) for p in hidden})
    extra = ""
    if plan.get("host_pid") and uid is not None:
        try:  # a /proc of our own: other users' processes (the host) are not even listed
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
            extra = "; /proc hides other users' processes"
        except OSError as e:
            extra = f"; /proc shows every process ({e.strerror})"
    exposed = _expose(plan["read"], workdir) if uid is not None else []
    layers["mounts"] = ("on: private mount namespace; games, records, /dev/shm, /dev/mqueue and /var/tmp hidden"
                        + extra + (f"; Python re-exposed under {', '.join(exposed)}" if exposed else "")
                        if err is None else f"off: {err}")
    return err is None


def set_limits(plan: dict[str, Any], one_process: bool) -> str:
    mb = 1 << 20
    limits = [(resource.RLIMIT_AS, int(plan.get("memory_mb", 2048)) * mb),
              (resource.RLIMIT_FSIZE, int(plan.get("file_mb", 16)) * mb),
              (resource.RLIMIT_NOFILE, int(plan.get("open_files", 64))),
              (resource.RLIMIT_CORE, 0)]
    if one_process:  # the worker, the call's process (which lowers it to 1: no thread), and slack for the
        limits.append((resource.RLIMIT_NPROC, NPROC))  # zombies a restart leaves until init reaps them
    failed = []
    for lim, value in limits:
        try:
            resource.setrlimit(lim, (value, value))
            if resource.getrlimit(lim) != (value, value):
                failed.append(str(lim))
        except (ValueError, OSError):
            failed.append(str(lim))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large file fails, not the kernel
    what = "address space, file size, open files, core" + (", one process per call" if one_process else "")
    return f"on: hard {what}" if not failed else f"partly: could not set {', '.join(failed)}"


def _drop(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    err = verify.uid(uid, gid)
    if err:
        raise OSError(f"the uid drop failed: {err}")


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


def _join_cgroup(plan: dict[str, Any]) -> str:
    cg = plan.get("cgroup")
    if not cg:
        return "off: " + (plan.get("cgroup_off") or "none planned")
    try:
        with open(cg["procs"], "w") as f:
            f.write(str(os.getpid()))
    except OSError as e:
        return f"off: cannot join {os.path.dirname(cg['procs'])} ({e.strerror})"
    err = verify.cgroup(cg["procs"], cg["limit_file"], int(cg["limit"]))
    return (f"on: a memory cgroup of its own ({cg['version']}: its address space, disk quota and 64 MB)"
            if err is None else f"off: {err}")


def _file_modes(plan: dict[str, Any]) -> str | None:
    """After the drop: the host's root-only probe file and every folder to hide are closed."""
    checks = {p: verify.closed(p) for p in [plan.get("closed_probe"), *plan.get("hide", [])] if p}
    return verify.summary(checks)


def _cap_sys_admin() -> bool:
    with open("/proc/self/status") as f:
        return bool(int(next(ln.split()[1] for ln in f if ln.startswith("CapEff:")), 16) >> 21 & 1)


def _user_namespace(map_ids: Callable[[], bool] | None) -> str | None:
    """Root without CAP_SYS_ADMIN (Kaggle-like): a user namespace of its own, in which it may make
    the others and mount (the host writes its id maps: 0 and its uid, each to itself, as only a
    process outside may). None, or why not (Docker's default seccomp profile refuses it)."""
    if map_ids is None:
        return "no one to map its ids"
    try:
        os.unshare(os.CLONE_NEWUSER)
    except OSError as e:
        return f"no user namespace ({e.strerror})"
    if not map_ids() or os.geteuid() != 0:
        raise OSError("the host did not map the worker's ids in its user namespace")
    return None


def confine(plan: dict[str, Any], map_ids: Callable[[], bool] | None = None) -> dict[str, str]:
    """Apply the plan's layers to this process, in order; returns what was verified. `map_ids()`
    asks the host to map its ids in a user namespace (duck.sandbox.process.ready)."""
    layers: dict[str, str] = {}
    parent = os.getppid()  # the host (duck.sandbox.process.spawn)
    try:  # before any file-system rule: the binding finds and loads libseccomp
        from duck.sandbox.wall import seccomp  # noqa: F401 - imported now, loaded by _seccomp()
        _import_pyseccomp()
        seccomp_error = None
    except (ImportError, OSError, AttributeError, TypeError) as e:
        seccomp_error = f"{type(e).__name__}: {e}"
    root = os.geteuid() == 0
    uid = plan.get("uid")
    off = set(plan.get("off", ()))
    layers["cgroup"] = _join_cgroup(plan) if root else "off: not root"
    mounts = False
    admin = root and _cap_sys_admin()
    userns = None if not root or "namespaces" in off or admin else _user_namespace(map_ids)
    if root and "namespaces" not in off and userns is None:
        mounts = _namespaces(plan, layers)
        if not admin:  # (in the user namespace it made: say so)
            layers.update({k: f"{v} (in a user namespace of its own)" for k, v in layers.items()
                           if k in ("network", "ipc", "mounts") and v.startswith("on")})
    else:
        layers["network"] = layers["mounts"] = layers["ipc"] = \
            "off: " + ("not root (no namespaces)" if not root else "turned off" if "namespaces" in off
                       else f"no CAP_SYS_ADMIN, and {userns}")
    if not mounts:
        layers["disk_quota"] = ("on: checked by the host (size and inodes of the temp dir, its unlinked open files, "
                                "and what its uid owns in /tmp, /var/tmp and /dev/shm)")
    closed = [p for p in plan["read"] if closed_ancestor(p)] if uid is not None and not mounts else []
    if closed:  # the dropped uid could not even import the standard library
        uid = None
        layers["uid"] = (f"off: the Python installation ({closed[0]}) is closed to other users and "
                         "no mount namespace can re-expose it")
    layers["limits"] = set_limits(plan, one_process=uid is not None and root)
    modes = "the worker keeps the host's uid"
    if uid is not None and root:
        _drop(uid, int(plan["gid"]))  # an error here is fatal: the host sees no `ready`
        # (The drop made it non-dumpable: no call's process, of the same uid, may open its
        # /proc/<pid>/mem. Each call's process makes itself dumpable: duck.sandbox.call.)
        layers["uid"] = "on: a uid of its own, no groups"
        modes = _file_modes(plan)
    elif "uid" not in layers:
        layers["uid"] = "off: " + ("not root" if not root else "turned off")
    if "/proc hides" in layers["mounts"] and uid is not None and (err := verify.hidepid(int(plan["host_pid"]))):
        layers["mounts"] = f"off: {err}"
    # SIGKILL when the host dies (a worker blocked on its pipe, or a call's process in a loop,
    # would outlive a host killed without its clean-up). After the uid drop, which clears it; a
    # host that died before this line shows as another parent.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # before Landlock, always
    layers["filesystem"] = _filesystem(plan, off, mounts, modes)
    if "seccomp" in off:
        layers["seccomp"] = "off: turned off"
    elif seccomp_error is None:
        layers["seccomp"] = _seccomp()
    else:
        layers["seccomp"] = f"off: {seccomp_error}"
    sec = layers["seccomp"].startswith("on")
    if layers["network"].startswith("off") and sec:
        layers["network"] = "on: seccomp denies every socket"
    if layers["ipc"].startswith("off") and sec:
        layers["ipc"] = "on: seccomp denies SysV IPC, POSIX queues and memfd"
    own = os.getsid(0) == os.getpid()
    layers["process"] = ("off: the worker shares the host's session" if not own else
                         "on: a session of its own; seccomp denies setpgid, setsid and stop signals" if sec
                         else "partly: a session of its own; nothing stops a stop signal")
    return {k: layers[k] for k in LAYERS if k in layers}


def _filesystem(plan: dict[str, Any], off: set[str], mounts: bool, modes: str | None) -> str:
    """Landlock (no_new_privs is set), and what stands in where it does not hold: the mount
    namespace, or file modes (`modes`: None when they hold, else why not). Its layer line."""
    nnp = verify.no_new_privs()
    if not plan.get("landlock", True):
        line = "off: " + ("turned off" if "landlock" in off else "no landlock on this kernel")
    elif nnp:
        line = f"off: {nnp}"
    else:
        try:
            abi = landlock.restrict([*plan["read"], *SYSTEM_READ], [plan["workdir"]], rw_files=["/dev/null"])
            err = verify.landlock(plan["workdir"])
            line = (f"on: landlock ABI {abi} (read: Python and system libraries; write: the temp dir)"
                    f"{'; no TCP' if abi >= 4 else ''}{'; no signals outside' if abi >= 6 else ''}" if err is None
                    else f"off: landlock did not hold ({err})")
        except OSError as e:
            line = f"off: {e}"
    if line.startswith("on"):
        return line
    if mounts:
        return line + "; the mount namespace hides the games and the records"
    if modes is None:
        return ("on: file modes (the worker's uid cannot open the host's root-only files: the games copy, records "
                f"and conversations); landlock {line}")
    return line + f"; file modes do not hold ({modes})"


def _seccomp() -> str:
    """Load the seccomp filter and verify it: its layer line."""
    from duck.sandbox.wall import seccomp
    try:
        n = seccomp.load(seccomp.TEMPLATE, os.getpid())
        err = verify.seccomp()
        return f"on: {n} rules (libseccomp), and each call's own" if err is None else f"off: {err}"
    except OSError as e:
        return f"off: {e}"


# The layers in the order the header and `duck doctor` show them.
LAYERS = ("uid", "seccomp", "network", "filesystem", "mounts", "ipc", "disk_quota", "cgroup", "limits",
          "process", "guard")
