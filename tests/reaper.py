"""Run a command and find every process it left behind: `python tests/reaper.py REPORT -- CMD...`.

The reaper makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every process
the command started that outlives it (a kernel worker, anything a worker spawned, however it
detached: a new session, a double fork) is re-parented to the reaper instead of init. After
the command exits, the reaper's remaining descendants are exactly what this run left: no
counting by uid range across the machine, so another `duck play` on the same machine cannot
disturb the count (issue 31). They are listed in REPORT (JSON: the command's exit status and
each leftover's pid, uid and command line), then killed and reaped; the reaper exits with the
command's status.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in _children(p)]
        found += frontier
    return found


def _describe(pid: int) -> dict:
    info = {"pid": pid}
    try:
        with open(f"/proc/{pid}/stat") as f:
            info["state"] = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/status") as f:
            info["uid"] = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            info["cmdline"] = f.read().replace(b"\0", b" ").decode("utf-8", "replace")[:300]
    except (OSError, StopIteration):
        pass
    return info


def main(argv: list[str]) -> int:
    report, cmd = argv[0], argv[argv.index("--") + 1:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("reaper: PR_SET_CHILD_SUBREAPER failed")
    rc = subprocess.call(cmd)
    time.sleep(0.5)  # let the kernel re-parent what the command's exit orphaned
    left = [_describe(p) for p in descendants(os.getpid())]
    left = [x for x in left if "uid" in x and x.get("state") != "Z"]  # a zombie has ended already
    with open(report, "w") as f:
        json.dump({"rc": rc, "leftovers": left}, f)
    for x in left:
        try:
            os.kill(x["pid"], signal.SIGKILL)
        except OSError:
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
