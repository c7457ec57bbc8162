"""How long `duck` takes to start and to stop: `duck bench startup [--runs 5]
[--baseline-duck PATH]`.

Times, as wall clock of a fresh process each, `duck --help` and the explorer's shortest run
(`duck play --games tests/games --only zs01 --policy explorer --max-actions 1`: start-up,
config, the toolkit, one game made and one action recorded, score.json, run.json), `--runs`
times each, interleaved with the same commands of `--baseline-duck` (another checkout's
`.venv/bin/duck`, e.g. main's) when given. `stop`: a two-worker explorer run of the bundled
games (5000 actions each) gets a terminal's Ctrl-C (SIGINT to its process group) once its
first record has 20 actions; the time from the signal to the process's exit (this duck only:
what it must beat is the issue's 17 s of queued games playing on). Prints JSON: per command
the median, min and max in seconds (and the median CPU seconds, user + system, which a
loaded machine does not inflate), the ratio to the baseline's median, the exit statuses of
the stops, and the machine's load. The issue's bar: start-up under 1 s."""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GAMES = Path(__file__).resolve().parents[2] / "tests" / "games"


CPU: dict[str, list[float]] = {}  # command -> CPU seconds (user + system) of each run: what load does not inflate


def _time(argv: list[str], key: str = "") -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(key, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return dt


def _stop(duck: str, out: Path) -> tuple[float, int]:
    """Seconds from a Ctrl-C to the run's exit, and its exit status."""
    proc = subprocess.Popen([duck, "play", "--games", str(GAMES), "--max-actions", "5000", "--workers", "2",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: the signal reaches it and its workers only
    t0 = time.monotonic()
    while sum(p.read_text().count('"type":"action"') for p in (out / "records").glob("*.jsonl")) < 20:
        if proc.poll() is not None or time.monotonic() - t0 > 120:
            proc.kill()
            raise SystemExit("the run ended or stalled before it could be interrupted")
        time.sleep(0.05)
    t1 = time.perf_counter()
    os.killpg(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=120)
    return time.perf_counter() - t1, code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="duck bench startup", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="fresh processes per command (default 5)")
    p.add_argument("--duck", default=str(Path(sys.executable).parent / "duck"), help="the duck to time")
    p.add_argument("--baseline-duck", default=None, help="another duck executable, timed interleaved")
    a = p.parse_args(argv)
    arms = {"this": a.duck} | ({"baseline": a.baseline_duck} if a.baseline_duck else {})
    times: dict[str, dict[str, list[float]]] = {arm: {"help": [], "explorer": []} for arm in arms}
    times["this"]["stop"], codes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            dt, code = _stop(a.duck, Path(tmp) / f"stop-{i}")
            times["this"]["stop"].append(dt)
            codes.append(code)
            for arm, duck in arms.items():
                times[arm]["help"].append(_time([duck, "--help"], f"{arm}.help"))
                out = Path(tmp) / f"{arm}-{i}"
                times[arm]["explorer"].append(_time([duck, "play", "--games", str(GAMES), "--only", "zs01", "--policy",
                                                     "explorer", "--max-actions", "1", "--out", str(out)],
                                                    f"{arm}.explorer"))
    doc: dict = {"runs": a.runs, "loadavg_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
                 "stop_exit_codes": codes}
    for arm, per in times.items():
        doc[arm] = {cmd: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3),
                          "max_s": round(max(v), 3)} for cmd, v in per.items()}
    for key, v in CPU.items():  # wall clock on a loaded machine is mostly waiting; CPU time is the work
        arm, cmd = key.split(".")
        doc[arm][cmd]["cpu_median_s"] = round(statistics.median(v), 3)
    if "baseline" in doc:
        doc["ratio"] = {cmd: round(doc["this"][cmd]["median_s"] / doc["baseline"][cmd]["median_s"], 3)
                        for cmd in ("help", "explorer")}
    print(json.dumps(doc, indent=1))
    return 0
