"""`duck bench wall`: what issue 48's wall costs, as JSON (also `python devkit/bench/wall.py`, so that
the same script measures an older checkout put first on PYTHONPATH).

`layers`: what a worker verified here (the record header's report). `call_ms`: the median time
of `k.run("x = 1")`, and `call_ms_namespace` with a namespace of `--functions` functions, a board
array, a dict of 4,096 tuple keys and a list of 1,000 numbers carried; `worker_rss_mb` and, while a
call sleeps, `call_rss_mb` and `call_private_mb` (its own pages) of the call's process. Where the
host counts the disk (the mount namespace off): `walk_ms`, one count of a temp dir of `--files`
files; `quota_core_during` and `quota_core_between`, the host's CPU seconds a second (beyond an
otherwise idle host) while a call sleeps 5 s and between calls for 5 s, with those files.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

NAMESPACE = """import numpy as np
board = np.zeros((64, 64), np.int8)
cells = {(r, c): r * c for r in range(64) for c in range(64)}
seen = list(range(1000))
""" + "".join(f"def f{i}(x, y=1):\n    return x + y + {i}\n" for i in range(200))


def _rss(pid: int, field: str = "VmRSS:") -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(ln.split()[1] for ln in f if ln.startswith(field))) / 1024
    except (OSError, StopIteration):
        return 0.0


def _private(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(ln.split()[1]) for ln in f if ln.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024
    except OSError:
        return 0.0


def _kernel(tmp: str, name: str, **cfg: object):
    from duck.config import KernelConfig
    from duck.game.source import GameSource
    from duck.play.record import RecordWriter
    from duck.play.session import Session
    from duck.sandbox.host import Kernel
    source = GameSource.offline(Path(__file__).resolve().parents[2] / "tests" / "games")
    gid = next(g for g in source.game_ids() if g.startswith("zs01"))
    g = source.make(gid)
    writer = RecordWriter(Path(tmp) / f"{name}.jsonl")
    writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="bench", seed=0)
    k = Kernel(Session(g, writer, max_actions=100), KernelConfig(call_timeout_s=60, **cfg))
    k.start()
    return k


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _per_call(k, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        k.run("x = 1")
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2)


def _memory(k) -> dict:
    out = {"worker_rss_mb": round(_rss(k.proc.pid), 1)}
    if not hasattr(k, "call_pid"):
        return out
    seen = {}

    def look() -> None:
        time.sleep(0.5)
        pid = k.call_pid
        if pid:
            seen.update(call_rss_mb=round(_rss(pid), 1), call_private_mb=round(_private(pid), 1))

    t = threading.Thread(target=look)
    t.start()
    k.run("import time\ntime.sleep(1)")
    t.join()
    return out | seen


def _quota(tmp: str, files: int, n: int) -> dict:
    k = _kernel(tmp, "counted", layers_off=["namespaces"], disk_inodes=files + 1024)
    try:
        k.run(f"for i in range({files}):\n    open(f'f{{i}}', 'w').close()")
        walks = []
        for _ in range(n):
            t = time.perf_counter()
            k.over_quota()
            walks.append((time.perf_counter() - t) * 1000)
        c0, t0 = _cpu(), time.monotonic()
        k.run("import time\ntime.sleep(5)")
        during = (_cpu() - c0) / (time.monotonic() - t0)
        c0, t0 = _cpu(), time.monotonic()
        time.sleep(5)
        between = (_cpu() - c0) / (time.monotonic() - t0)
    finally:
        k.close()
    return {"walk_ms": round(statistics.median(walks), 1), "quota_core_during": round(during, 4),
            "quota_core_between": round(between, 4), "files": files}


def measure(n: int = 100, files: int = 1000) -> dict:
    from duck.sandbox.wall import isolation
    out: dict = {"layers": isolation.report()}
    with tempfile.TemporaryDirectory() as tmp:
        k = _kernel(tmp, "plain")
        try:
            k.run("pass")
            out["call_ms"] = _per_call(k, n)
            k.run(NAMESPACE)
            out["call_ms_namespace"] = _per_call(k, n)
            out |= _memory(k)
        finally:
            k.close()
        idle0, t0 = _cpu(), time.monotonic()
        time.sleep(2)
        idle = (_cpu() - idle0) / (time.monotonic() - t0)  # this process alone, no kernel
        q = _quota(tmp, files, max(3, n // 10))
        q["quota_core_during"] = round(q["quota_core_during"] - idle, 4)
        q["quota_core_between"] = round(q["quota_core_between"] - idle, 4)
        out |= q
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="duck bench wall", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100, help="calls (and walks: a tenth) per median")
    ap.add_argument("--files", type=int, default=1000, help="files in the temp dir the host counts")
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.n, args.files), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
