"""`duck doctor` end to end on CPU against the rehearsal's stand-in vLLM, and its metrics parser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from duck.sandbox import isolation

from duck.lab import vllm_metrics
from duck.lab.doctor import lock_pin, vllm_import
from duck.testing.rehearse.layout import write_standin

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("DUCK_VLLM_VENV") or Path.home() / ".cache" / "duck-arc3" / "vllm-0.19.0")
LOGGERS = next(VENV.glob("lib/python*/site-packages/vllm/v1/metrics/loggers.py"), None) if VENV.exists() else None

# What prometheus_client 0.2x (vLLM 0.19's) writes for these metrics (a sample of its format).
EXPOSITION = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen3.6-27B-FP8"} 120000.0
vllm:prefix_cache_queries_created{engine="0",model_name="Qwen3.6-27B-FP8"} 1.79e+09
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen3.6-27B-FP8"} 118800.0
vllm:generation_tokens_total{engine="0",model_name="Qwen3.6-27B-FP8"} 5000.0
vllm:num_requests_running{engine="0",model_name="Qwen3.6-27B-FP8"} 3.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="11136",prefix_caching_hash_algo="sha256"} 1.0
"""


def test_the_parser_reads_prometheus_text():
    s = vllm_metrics.summary(EXPOSITION)
    assert s["prefix_cache_queries"] == 120000 and s["prefix_cache_hits"] == 118800  # (`_created` is not a count)
    assert s["generation_tokens"] == 5000 and s["num_requests_running"] == 3
    assert s["kv_cache_tokens"] == 11136 * 16
    assert vllm_metrics.summary("")["kv_cache_tokens"] is None


@pytest.mark.skipif(LOGGERS is None, reason=f"no vLLM venv at {VENV} (bash scripts/vllm-venv.sh)")
def test_the_metric_names_are_the_pinned_vllms():
    source = LOGGERS.read_text()
    for key in (*vllm_metrics.COUNTERS, *vllm_metrics.GAUGES):
        assert f'name="vllm:{key}"' in source, key
    assert 'name = "vllm:cache_config_info"' in source
    assert "vllm:gpu_prefix_cache_queries" not in source  # the V0 name is gone in 0.19
    assert lock_pin(ROOT / "kaggle-dataset" / "vllm.lock") == VENV.name.removeprefix("vllm-")


def test_a_venv_without_vllm_is_reported():
    r = vllm_import(Path(sys.executable), "0.19.0", timeout_s=60)
    assert r["ok"] is False and "No module named 'vllm'" in r["error"]
    assert vllm_import(None, "0.19.0")["ok"] is False


def test_doctor_end_to_end_on_cpu_against_the_standin(tmp_path, bundled):
    standin = write_standin(tmp_path / "bin" / "vllm")
    env = dict(os.environ, DUCK_STANDIN_LATENCY="speed=20", DUCK_STANDIN_BOOT_S="0.5")
    out = tmp_path / "doctor"
    r = subprocess.run([sys.executable, "-m", "duck.cli", "doctor", "--executable", str(standin),
                        "--games", str(bundled), "--game-seconds", "12", "--out", str(out),
                        "--vllm-python", str(tmp_path / "no-venv" / "python"),
                        "--set", "model.serve.ready_timeout_s=60", "model.timeout_s=20"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    doc = json.loads((out / "doctor.json").read_text())
    steps, f = doc["steps"], doc["figures"]
    assert r.returncode == (0 if doc["ok"] else 1), r.stderr[-2000:]
    if shutil.which("nvidia-smi") is None:
        assert steps["gpu"]["ok"] is False and "nvidia-smi" in steps["gpu"]["message"]
    assert steps["gpu"]["needs"] == ["12.8", "570.26"]  # from vllm.lock
    assert steps["vllm_import"]["ok"] is False and "no vLLM venv" in steps["vllm_import"]["error"]
    assert steps["serve"]["ok"] and f["boot_s"] >= 0.5
    assert steps["smoke_chat"]["ok"] and steps["smoke_chat"]["latency_s"] > 0
    play = steps["play"]
    assert play["ok"] and len(play["games"]) == 3 and all(g["actions"] > 0 for g in play["games"].values())
    assert play["errors"] == 0
    assert 0 < f["decode_tokens_per_s"] and 0 < f["decode_tokens_per_s_per_stream"]
    assert 0 < f["prefix_cache_hit_rate"] < 1  # the first prompt of each game is not cached
    assert f["prefix_cache_hit_rate"] == pytest.approx(play["records_cache_hit_rate"], abs=0.02)
    assert f["tool_call_failure_rate"] == 0  # the stand-in always answers with a valid call
    assert 0 < f["median_model_latency_s"] < 20
    assert f["kv_cache_tokens"] == 178_176  # the stand-in reports DESIGN §1c's cache
    assert 0 < f["harness_share"] < 1
    layers = f["isolation"]  # the sandbox's own report: every layer named, on or off with why
    assert layers == json.loads(json.dumps(isolation.report(), default=str))
    assert {"uid", "seccomp", "filesystem"} <= set(layers)
    assert "duck doctor:" in r.stdout and (out / "vllm.log").exists()
