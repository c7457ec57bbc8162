"""`duck bench sandbox`: what issue 30's verified layers cost.

Prints JSON: `probe_ms` (the median time of the layer report every record header carries:
a probe worker that confines itself, verifies each layer and exits, duck.sandbox.probe),
`worker_start_ms` (the median time from starting a kernel worker, all its layers applied and
verified, to the answer of its first snippet), `quota_check_ms` (the median time of one count
of the host's where no tmpfs bounds the temp dir: a temp dir of `--files` files, the
worker's open files and what its uid owns in /tmp, /var/tmp and /dev/shm; it runs every
0.5 s of a call and after each call in that posture), and `layers` (the report itself). The
medians are over `--n` repetitions, each kind in turn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.paths import BUNDLED_GAMES
from duck.play.session import recorded_session
from duck.sandbox.wall import isolation
from duck.sandbox.host import Kernel


def _kernel(tmp: str, cfg: KernelConfig, name: str) -> Kernel:
    source = GameSource.offline(BUNDLED_GAMES)
    return Kernel(recorded_session(source, source.game_ids()[0], Path(tmp) / f"{name}.jsonl", 10), cfg)


def measure(n: int = 7, files: int = 1000) -> dict:
    probe, start, check = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        full = _kernel(tmp, KernelConfig(), "full")
        counted = _kernel(tmp, KernelConfig(layers_off=["landlock", "namespaces"]), "counted")
        try:
            full.start()
            counted.start()
            counted.run(f"for i in range({files}):\n    open(f'f{{i}}', 'w').write('x')")
            for _ in range(n):
                isolation.report.cache_clear()
                t = time.perf_counter()
                layers = isolation.report()
                probe.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                full.restart()
                full.run("pass")
                start.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                counted.over_quota()
                check.append((time.perf_counter() - t) * 1000)
        finally:
            full.close()
            counted.close()
    return {"probe_ms": round(statistics.median(probe), 1), "worker_start_ms": round(statistics.median(start), 1),
            "quota_check_ms": round(statistics.median(check), 2), "files": files, "n": n, "layers": layers}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="duck bench sandbox", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=7, help="repetitions of each measure")
    p.add_argument("--files", type=int, default=1000, help="files in the counted kernel's temp dir")
    args = p.parse_args(argv)
    print(json.dumps(measure(args.n, args.files)))
    return 0
