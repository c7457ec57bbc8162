"""`duck bench load`: many games at once through the runner, the agent and the kernel
against the stub server's latency model (a short run on the bundled games)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

FIELDS = {"games", "actions_per_game", "turns_per_game", "harness_share", "max_ready_wait_s", "cpu_s_per_action",
          "kernel_rss_mb", "total_rss_mb", "errors"}


def test_load_bench_plays_every_game_and_prints_the_figures(tmp_path, bundled):
    # 30 s of play: at 15 s a game on a machine loaded ~6x over its cores (load 12 on 2) once made no action
    r = subprocess.run([sys.executable, "-m", "duck.cli", "bench", "load", "--games", "4", "--minutes", "0.5",
                        "--folder", str(bundled), "--latency", "speed=20", "--out", str(tmp_path / "load"),
                        "--per-game"], capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert FIELDS <= set(doc)
    assert set(doc["actions_per_game"]) == {"min", "median"} and set(doc["turns_per_game"]) == {"min", "median"}
    assert set(doc["kernel_rss_mb"]) == {"median", "max"}
    # Three bundled games, the first repeated as a second conversation of its own.
    assert doc["games"] == 4 and sum("~1" in g for g in doc["per_game"]) == 1
    assert doc["errors"] == 0, doc["error_messages"]
    assert doc["actions_per_game"]["min"] > 0 and doc["turns_per_game"]["min"] >= 2
    assert all(g["actions"] > 0 for g in doc["per_game"].values())
    assert 0 < doc["harness_share"] < 0.5 and doc["max_ready_wait_s"] > 0
    assert 5 < doc["kernel_rss_mb"]["median"] <= doc["kernel_rss_mb"]["max"] < doc["total_rss_mb"]
    assert doc["cpu_s_per_action"] > 0 and doc["kernels_at_once"] == 4
    assert 0 < doc["prefix_cache_hit_rate"] < 1 and doc["tool_call_failure_rate"] == 0
    records = sorted(p.name for p in (tmp_path / "load" / "records").glob("*.jsonl"))
    assert len(records) == 4 and (tmp_path / "load" / "load.json").exists()
