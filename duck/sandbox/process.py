"""Host process control: starting a worker, and ending it whatever its code did (host side).

Model code once joined the host's process group, then slept at exit, stopped itself or swallowed
its time-outs, and `duck play` never ended (issue 30). So: the worker starts in a session of its
own (no controlling terminal, no way into the host's group; seccomp denies setpgid and setsid
too); its plan travels over the pipe, never on its command line; `end()` kills by pid, group and
uid, and every wait has a time-out (a worker the kernel cannot reap is reported, never waited on).
A host that dies takes its workers with it: each asks for SIGKILL at its parent's death
(PR_SET_PDEATHSIG), and since that signal follows the forking thread, every worker is forked from
one thread that lives as long as the process (`_popen`), never from start_soon's or a game's.
`ready()` takes the worker's first messages (the id maps of its user namespace, written here:
`map_ids`; its verified layers); `probe()` starts a worker that only confines itself
(duck.sandbox.probe): the layer report of every record header comes from it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duck.sandbox import trust, wire
from duck.sandbox.wall import quota

IMPORT_ROOT = Path(__file__).resolve().parents[2]  # where `duck` is imported from (PYTHONPATH)
REAP_S = 5.0  # after SIGKILL, how long the host waits for the worker to be reaped
START_S = 30.0  # a worker that has not confined itself by then is not going to


@dataclass
class Started:
    proc: subprocess.Popen
    wfd: int  # the host's write end (non-blocking)
    reader: wire.Reader
    errfd: int = -1  # the read end of the worker's stderr (non-blocking; a pipe, never a file)


def environment(workdir: str) -> dict[str, str]:
    """The worker's whole environment: nothing of the host's."""
    return {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": workdir, "TMPDIR": workdir,
            "LANG": "C.UTF-8", "PYTHONPATH": str(IMPORT_ROOT), "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", "PYTHONBREAKPOINT": "0",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


_forker: ThreadPoolExecutor | None = None  # its one thread forks this process's workers
_forker_lock = threading.Lock()
os.register_at_fork(after_in_child=lambda: globals().update(_forker=None, _forker_lock=threading.Lock()))


def _popen(*args: Any, **kw: Any) -> subprocess.Popen:
    """subprocess.Popen, forked by the forking thread (see the module docstring; made at first
    use, and again in a forked child, where threads do not survive)."""
    global _forker
    with _forker_lock:
        if _forker is None:
            _forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duck-worker-parent")
        forker = _forker
    return forker.submit(subprocess.Popen, *args, **kw).result()


def spawn(cfg: dict[str, Any], workdir: str, max_message: int,
          module: str = "duck.sandbox.worker") -> Started:
    """Start `python -m MODULE RFD WFD` in `workdir` and send it `cfg` (its plan)."""
    h2w_r, h2w_w = os.pipe()
    w2h_r, w2h_w = os.pipe()
    err_r, err_w = os.pipe()  # its stderr: a pipe, whose capacity caps it (issue 37: not a file)
    try:
        proc = _popen(
            [sys.executable, "-s", "-m", module, str(h2w_r), str(w2h_w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_w, cwd=workdir,
            env=environment(workdir), pass_fds=(h2w_r, w2h_w), start_new_session=True)
    except BaseException:
        for fd in (h2w_r, h2w_w, w2h_r, w2h_w, err_r, err_w):
            os.close(fd)
        raise
    for fd in (h2w_r, w2h_w, err_w):
        os.close(fd)
    os.set_blocking(h2w_w, False)  # writes wait with a deadline, never forever
    os.set_blocking(err_r, False)
    started = Started(proc, h2w_w, wire.Reader(w2h_r, max_message, wire.MAX_NODES), err_r)
    try:
        wire.send(h2w_w, {"op": "config", "cfg": cfg}, deadline=time.monotonic() + 10)
    except wire.WireError:
        end(started, None)
        raise
    return started


def end(started: Started, uid: int | None) -> str | None:
    """Kill the worker and everything it could have left, then reap it with a time-out and
    close the pipes. Returns None, or why the worker could not be reaped."""
    proc = started.proc
    if proc.returncode is None:  # not reaped yet: its pid (and group id) cannot have been reused
        kill_all([proc.pid, *([] if uid is not None else descendants(proc.pid))])
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    if uid is not None:
        end_uid(uid)
    note = None
    try:
        proc.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        note = f"the kernel worker (pid {proc.pid}) was not reaped within {REAP_S:.0f} s of SIGKILL"
    if uid is not None:
        end_uid(uid)  # anything that raced the first round
    for fd in (started.wfd, started.reader.fd, started.errfd):
        try:
            os.close(fd)
        except OSError:
            pass
    return note


def last_error_line(started: Started) -> str:
    """The last line the worker wrote to its stderr so far (why it did not start)."""
    tail = b""
    try:
        while chunk := os.read(started.errfd, 1 << 16):
            tail = (tail + chunk)[-2000:]
    except OSError:
        pass
    lines = tail.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def ready(started: Started, uid: int | None, probe: bool = False) -> dict[str, str] | None:
    """The layers of the worker's `ready` message (what it verified), cut to size and, for a
    `probe` (dumpable as each call's process is), with the disk quota failed closed where the
    host cannot count it (duck.sandbox.wall.quota.fail_closed); None if it did not come within START_S."""
    end = time.monotonic() + START_S
    try:
        got = started.reader.recv(end)
        msg = trust.check(got[0], ("userns", "ready")) if got is not None else None
        if msg is not None and msg["op"] == "userns":  # (before any model code: it asks once, at start)
            map_ids(started.proc.pid, uid)
            wire.send(started.wfd, {"op": "mapped"}, deadline=end)
            got = started.reader.recv(end)
            msg = trust.check(got[0], ("ready",)) if got is not None else None
    except (wire.WireError, OSError):
        return None
    if msg is None:
        return None
    layers = {trust.text(k, 40): trust.text(v, 300) for k, v in msg["layers"].items()}
    return quota.fail_closed(layers, started.proc.pid, uid) if probe else layers  # (while it lives)


def map_ids(pid: int, uid: int | None) -> None:
    """Map, in the worker's new user namespace, root and its own uid each to itself (it drops to
    that uid; only a process outside the namespace with CAP_SETUID may write more than one line)."""
    lines = "0 0 1\n" + (f"{uid} {uid} 1\n" if uid else "")
    for name in ("uid_map", "gid_map"):
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)


def probe(cfg: dict[str, Any], workdir: str) -> dict[str, str] | str:
    """Start a worker that confines itself by `cfg` and exits: its verified layers, or why it
    did not start."""
    started = spawn(cfg, workdir, 1 << 20, module="duck.sandbox.probe")
    uid = cfg["plan"].get("uid")
    layers = ready(started, uid, probe=True)
    if layers is None:
        line = last_error_line(started)
        end(started, uid)
        return line or "the probe worker did not start"
    try:
        wire.send(started.wfd, {"op": "exit"}, deadline=time.monotonic() + 2)
        started.proc.wait(timeout=2)
    except (wire.WireError, subprocess.TimeoutExpired):
        pass
    end(started, uid)
    return layers


# --- what outlived a call ----------------------------------------------------------------

def _live_uid(pid: str) -> int | None:
    """The real uid of a live process (a zombie, dead and waiting for its parent, has none)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("State:", "Uid:")))
        return None if fields["State"].split()[0] == "Z" else int(fields["Uid"].split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None


def pids_of_uid(uid: int) -> list[int]:
    """Every live process whose real uid is `uid` (/proc's owner can be changed by the process
    itself, PR_SET_DUMPABLE; the status line cannot)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and _live_uid(name) == uid]


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children that left the process group included)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        found += sorted(frontier)
    return found


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def kill_all(pids: list[int]) -> int:
    """SIGKILL each of `pids` (one already gone is skipped); returns how many there were."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


def end_uid(uid: int) -> int:
    """Kill every process of `uid`; returns how many there were."""
    return kill_all(pids_of_uid(uid))


def leftovers(worker_pid: int, uid: int | None) -> list[int]:
    """Processes other than the worker that a call left behind."""
    if uid is not None:
        return [p for p in pids_of_uid(uid) if p != worker_pid]
    return descendants(worker_pid)
