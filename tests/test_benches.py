"""Every `duck bench NAME` runs (issue 40): each benchmark of devkit/bench/, as a
subprocess on a tiny input, exits 0 and prints JSON with its main keys, so that a merge
cannot break one silently (the context benchmark crashed for weeks after ~13 minutes of
replays, in its synthetic game, which no test ran).

The benchmarks start together (one process each) and every test waits for its own: most of
their time is start-up and waiting on their own subprocesses, so the lot takes about as
long as the slowest. Those that need the public games or the Duck's traces (../shared) are
skipped where these are absent (CI has ../shared, not environment_files/); the context
benchmark then plays its synthetic game only.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import devkit.bench
from duck.paths import SHARED

from conftest import BUNDLED, PUBLIC, ROOT

TRACES = SHARED / "duck-traces"
HAVE_PUBLIC = any(PUBLIC.rglob("metadata.json"))
HAVE_TRACES = (TRACES / "runs.jsonl").is_file() and (TRACES / "turns").is_dir()
SHORT_GAME = "lp85"  # the Duck's shortest complete run of a public game (79 actions)


def benches(tmp: Path) -> dict[str, tuple[list[str], tuple[str, ...], str | None]]:
    """name -> (its tiny arguments, the keys its JSON must have, why it cannot run here or None)."""
    traces = None if HAVE_TRACES else f"the Duck's traces are not in {TRACES}"
    replay = ["--traces", str(TRACES), "--games", str(PUBLIC), "--game", SHORT_GAME, "--runs", "1", "--turns", "3"]
    return {
        "calibration": (["--reps", "3", "--perm", "20", "--boot", "20", "--shifts", "0.3"],
                        ("games", "designs"), traces),
        "context": ((replay if HAVE_PUBLIC and HAVE_TRACES else ["--runs", "0"])
                    + ["--synthetic-hours", "0.02", "--out", str(tmp / "context")],
                    ("runs", "traces", "per_game", "synthetic", "wall_s"), None),
        "explorer": (["--games", str(BUNDLED), "--only", "zs01", "--seeds", "0", "--max-actions", "20",
                      "--out", str(tmp / "explorer")], ("games", "overall"), None),
        "facts": (["--games", str(BUNDLED), "--only", "zs01", "--max-actions", "10"],
                  ("claims", "false", "false_total", "actions_with_false", "per_game"), None),
        "kernel": (["--games", str(BUNDLED), "--samples", "2", "--lengths", "2", "5", "--starts", "1"],
                   ("median_ms", "ratio_5_2", "startup_ms"), None),
        "load": (["--games", "2", "--minutes", "0.05", "--folder", str(BUNDLED), "--out", str(tmp / "load")],
                 ("games", "actions_per_game", "errors", "kernel_rss_mb"), None),
    }


def names_with_main() -> list[str]:
    """The benchmarks `duck bench` knows: the modules of devkit/bench/ with a `main`."""
    return sorted(m.name for m in pkgutil.iter_modules(devkit.bench.__path__) if not m.name.startswith("_")
                  and hasattr(importlib.import_module(f"devkit.bench.{m.name}"), "main"))


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """Every benchmark that can run here, started at once: name -> its process."""
    tmp = tmp_path_factory.mktemp("benches")
    procs = {name: subprocess.Popen([sys.executable, "-m", "duck.cli", "bench", name, *args], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, (args, _, why_not) in benches(tmp).items() if why_not is None}
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_every_benchmark_is_in_the_table(tmp_path):
    assert names_with_main() == sorted(benches(tmp_path)), "add the new benchmark's tiny run to benches()"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(benches(Path("/tmp"))))
def test_the_benchmark_runs_on_a_tiny_input(name, started, tmp_path):
    _, keys, why_not = benches(tmp_path)[name]
    if why_not is not None:
        pytest.skip(why_not)
    out, err = started[name].communicate(timeout=600)
    assert started[name].returncode == 0, f"duck bench {name}: exit {started[name].returncode}\n{err[-3000:]}"
    doc = json.loads(out)
    assert set(keys) <= set(doc), f"{name}: missing {set(keys) - set(doc)}"
    if name == "context":
        assert doc["synthetic"]["new"]["calls"] >= 1 and doc["synthetic"]["old"]["calls"] >= 1
