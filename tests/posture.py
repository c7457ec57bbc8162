"""The sandbox's postures for the tests: where a run starts, as far as privilege goes.

* `full`: this process as it is (root with every capability in CI: namespaces, mounts,
  Landlock, seccomp, a uid per worker).
* `kaggle`: root without CAP_SYS_ADMIN, as in Kaggle's container (no namespaces, no mounts;
  issue 30 found Landlock silently off there). `wrap(cmd)` starts `cmd` under `unshare -m`
  (a private mount namespace, so nothing here touches the machine's own mounts) in which the
  folders that close the Python installation to other users are replaced by a tmpfs that
  re-exposes only what is needed (pyenv under /root: Kaggle's Python is open to every user),
  then under `capsh --drop=cap_sys_admin`, which removes the capability from the bounding set
  before the command is executed.
* `docker`: root without CAP_SYS_ADMIN and without CAP_SYS_PTRACE, Docker's default set (so most
  likely Kaggle's), and no new namespace (Docker's seccomp profile): `wrap(cmd, "docker")`. The
  host cannot read another uid's /proc/<pid>/fd as root (issue 37) and the worker makes no user
  namespace (issue 48): its disk quota is the host's count. In `kaggle` it makes one: a tmpfs.

`current()` says which posture this process is in; `available()` whether the wrapped postures
can be started here (root, unshare and capsh present) and why not.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from duck.sandbox.wall.confine import closed_ancestor
from duck.sandbox.wall.isolation import python_paths

ROOT = Path(__file__).resolve().parent.parent
ENV = "DUCK_TEST_POSTURE"  # set in the wrapped process, so a nested test run knows where it is
CAP_SYS_PTRACE, CAP_SYS_ADMIN = 19, 21
DROPPED = {"kaggle": "cap_sys_admin", "docker": "cap_sys_admin,cap_sys_ptrace"}


def _cap(bit: int) -> bool:
    with open("/proc/self/status") as f:
        eff = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    return bool(eff >> bit & 1)


def cap_sys_admin() -> bool:
    return _cap(CAP_SYS_ADMIN)


def cap_sys_ptrace() -> bool:
    return _cap(CAP_SYS_PTRACE)


def current() -> str:
    if os.geteuid() != 0 or cap_sys_admin():
        return "full"
    return "kaggle" if cap_sys_ptrace() else "docker"


def available() -> str | None:
    """None when `wrap` works here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not cap_sys_admin():
        return "already without CAP_SYS_ADMIN"
    for tool in ("unshare", "capsh"):
        if shutil.which(tool) is None:
            return f"no {tool} (apt-get install util-linux libcap2-bin)"
    return None


def _exposures() -> list[tuple[str, list[str]]]:
    """(closed folder, names below it to keep) for the Python installation and the checkout."""
    groups: dict[str, set[str]] = {}
    for p in [*python_paths(), os.path.realpath(sys.executable), str(ROOT)]:
        top = closed_ancestor(p)
        if top:
            groups.setdefault(top, set()).add(p[len(top):].strip("/").split("/")[0])
    return sorted((top, sorted(names)) for top, names in groups.items())


# Docker's default seccomp profile, the part that matters here: without CAP_SYS_ADMIN no new
# namespace (unshare, setns, clone with a namespace flag; clone3 ENOSYS so libc uses clone),
# so no user namespace either. Loaded (no_new_privs first, as libseccomp does) before capsh.
NO_NAMESPACES = """import errno, os, sys
import pyseccomp as sc
f = sc.SyscallFilter(defaction=sc.ALLOW)
for name in ("unshare", "setns"):
    f.add_rule(sc.ERRNO(errno.EPERM), name)
for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
    f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
f.load()
os.execvp(sys.argv[1], sys.argv[1:])
"""


def wrap(cmd: list[str], which: str = "kaggle") -> list[str]:
    """`cmd` in posture `which` (kaggle: root without CAP_SYS_ADMIN; docker: without
    CAP_SYS_PTRACE as well, and Docker's seccomp profile: no namespace), with the Python
    installation open to other users."""
    lines = ["set -e"]
    for top, names in _exposures():
        for i, name in enumerate(names):
            src, stage = shlex.quote(os.path.join(top, name)), f'"$st/{i}"'
            lines += [f'mkdir {stage}', f"mount --bind {src} {stage}"]
        lines.append(f"mount -t tmpfs -o mode=0755,size=1m tmpfs {shlex.quote(top)}")
        for i, name in enumerate(names):
            dst = shlex.quote(os.path.join(top, name))
            lines += [f"mkdir {dst}", f'mount --move "$st/{i}" {dst}', f'rmdir "$st/{i}"']
    seccomp = f"{shlex.quote(sys.executable)} -c {shlex.quote(NO_NAMESPACES)} " if which == "docker" else ""
    # rmdir, never rm -r: a staging folder that still held a bind mount must not be emptied.
    script = "\n".join(['st=$(mktemp -d /tmp/duck-posture-XXXXXX)', *lines[1:], 'rmdir "$st"',
                        f'export {ENV}={which}',
                        f'exec {seccomp}capsh --drop={DROPPED[which]} -- -c \'exec "$0" "$@"\' "$@"'])
    return ["unshare", "-m", "--propagation", "private", "--", "sh", "-ec", script, "sh", *cmd]
