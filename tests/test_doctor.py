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
from duck.lab.doctor import LIMITS, lock_pin, vllm_import
from duck.testing.rehearse.layout import write_standin

ROOT = Path(__file__).resolve().parent.parent
PIN = lock_pin(ROOT / "kaggle-dataset" / "vllm.lock")
VENV = Path(os.environ.get("DUCK_VLLM_VENV") or Path.home() / ".cache" / "duck-arc3" / f"vllm-{PIN}")
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
    assert "vllm:gpu_prefix_cache_queries" not in source  # the V0 name is gone since 0.19
    spec = (LOGGERS.parent.parent / "spec_decode" / "metrics.py").read_text()
    for key in vllm_metrics.SPEC_COUNTERS:
        assert f'"vllm:{key}"' in spec, key
    assert lock_pin(ROOT / "kaggle-dataset" / "vllm.lock") == VENV.name.removeprefix("vllm-")


def test_mtp_acceptance_and_the_hybrid_pool_from_the_metrics():
    text = EXPOSITION + "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1000.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3000.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1750.0',
        'vllm:cache_config_info{block_size="1056",engine="0",kv_cache_size_tokens="998400",num_gpu_blocks="2000"} 1.0'])
    s = vllm_metrics.summary(text)
    d = vllm_metrics.delta(vllm_metrics.summary(""), s)
    assert vllm_metrics.mtp(d) is None  # (a missing counter before: no delta)
    zero = {k: 0.0 for k in (*vllm_metrics.COUNTERS, *vllm_metrics.SPEC_COUNTERS)}
    m = vllm_metrics.mtp(vllm_metrics.delta(zero, s))
    assert m == {"drafts": 1000.0, "tokens_per_step": 2.75, "acceptance": 0.583}  # FIELD §4: 2.6-2.9
    # 0.33 names the capacity of a hybrid model's groups; blocks x size would be wrong there.
    assert s["kv_cache_tokens"] == 11136 * 16 + 998400


def test_checks_hold_the_fields_operating_points():
    from duck.lab.operating import checks, decode_limit
    good = {"decode_tokens_per_s": 700.0, "prefix_cache_hit_rate": 0.95, "boot_s": 600.0,
            "tool_call_failure_rate": 0.0}
    assert all(c["ok"] for c in checks(good, 10, LIMITS).values())
    bad = dict(good, decode_tokens_per_s=550.0, prefix_cache_hit_rate=None, tool_call_failure_rate=0.1)
    got = checks(bad, 10, LIMITS)
    assert [k for k, c in got.items() if not c["ok"]] == ["decode_tokens_per_s", "prefix_cache_hit_rate",
                                                          "tool_call_failure_rate"]
    assert decode_limit(600, 10) == 600 and decode_limit(600, 16) == pytest.approx(600 * 1.6 ** 0.6, abs=0.1)
    assert checks(dict(good, boot_s=800.0), 10, LIMITS)["boot_s"]["ok"] is False  # boot <= 12 min


def test_a_venv_without_vllm_is_reported():
    r = vllm_import(Path(sys.executable), "0.19.0", timeout_s=60)
    assert r["ok"] is False and "No module named 'vllm'" in r["error"]
    assert vllm_import(None, "0.19.0")["ok"] is False


def test_doctor_end_to_end_on_cpu_against_the_standin(tmp_path, bundled):
    standin = write_standin(tmp_path / "bin" / "vllm")
    env = dict(os.environ, DUCK_STANDIN_LATENCY="speed=20", DUCK_STANDIN_BOOT_S="0.5")
    out = tmp_path / "doctor"
    r = subprocess.run([sys.executable, "-m", "duck.cli", "doctor", "--executable", str(standin),
                        "--games", str(bundled), "--game-seconds", "12", "--out", str(out), "--streams", "4",
                        "--vllm-python", str(tmp_path / "no-venv" / "python"),
                        "--set", "model.serve.ready_timeout_s=60", "model.timeout_s=20"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    doc = json.loads((out / "doctor.json").read_text())
    steps, f = doc["steps"], doc["figures"]
    assert r.returncode == (0 if doc["ok"] else 1), r.stderr[-2000:]
    if shutil.which("nvidia-smi") is None:
        assert steps["gpu"]["ok"] is False and "nvidia-smi" in steps["gpu"]["message"]
    assert steps["gpu"]["needs"] == ["13.0", "580.65.06"]  # from vllm.lock (CUDA 13: torch 2.14)
    assert steps["vllm_import"]["ok"] is False and "no vLLM venv" in steps["vllm_import"]["error"]
    assert steps["serve"]["ok"] and f["boot_s"] >= 0.5
    assert steps["smoke_chat"]["ok"] and steps["smoke_chat"]["latency_s"] > 0
    assert steps["plan"]["ok"] and steps["plan"]["slots"] == 10 and steps["plan"]["problems"] == []
    play = steps["play"]
    # Four at once from three bundled games: the first repeated as a conversation of its own.
    assert play["ok"] and len(play["games"]) == 4 and all(g["actions"] > 0 for g in play["games"].values())
    assert sum("~1" in g for g in play["games"]) == 1 and f["streams"] == 4
    assert play["errors"] == 0
    assert 0 < f["decode_tokens_per_s"] and 0 < f["decode_tokens_per_s_per_stream"]
    assert 0 < f["prefix_cache_hit_rate"] < 1  # the first prompt of each game is not cached
    assert f["prefix_cache_hit_rate"] == pytest.approx(play["records_cache_hit_rate"], abs=0.02)
    assert f["tool_call_failure_rate"] == 0  # the stand-in always answers with a valid call
    assert 0 < f["median_model_latency_s"] < 20
    assert f["kv_cache_tokens"] == f["kv_cache_tokens_planned"] // 16 * 16  # the stand-in reports the plan's pool
    assert f["mtp"]["tokens_per_step"] == pytest.approx(2.7, abs=0.15) and f["empty_tool_calls"] == 0
    c = doc["checks"]  # every figure against the field's operating point, each with its limit
    assert set(c) == {"decode_tokens_per_s", "prefix_cache_hit_rate", "boot_s", "tool_call_failure_rate"}
    assert c["boot_s"]["ok"] and c["tool_call_failure_rate"]["ok"] and c["decode_tokens_per_s"]["limit"] == ">= 346.2"  # 600 x (4/10)^0.6
    failing = [k for k, x in c.items() if not x["ok"]]
    assert doc["ok"] is False and "gpu" in r.stdout.splitlines()[-1]  # (no GPU here: named in the verdict)
    assert all(k in r.stdout.splitlines()[-1] for k in failing)
    assert 0 < f["harness_share"] < 1
    layers = f["isolation"]  # the sandbox's own report: every layer named, on or off with why
    assert layers == json.loads(json.dumps(isolation.report(), default=str))
    assert {"uid", "seccomp", "filesystem"} <= set(layers)
    assert "duck doctor:" in r.stdout and (out / "vllm.log").exists()


def test_an_empty_tool_call_is_a_tool_failure(tmp_path):
    """`{}` or "" arguments (what a streaming parser that lost them leaves, vllm#31501) are
    kept by the client (the agent tells the model the code is missing) but counted: in the
    record's `empty_calls` and in the doctor's tool-call failure rate."""
    from duck.config import ModelConfig
    from duck.lab.turns import summarize
    from duck.llm.client import ModelClient, empty_call
    from duck.play.record import RecordWriter, read_record
    from duck.testing.stub.models import FixedModel
    from duck.testing.stub.server import StubServer
    assert empty_call("{}") and empty_call("") and empty_call('{"code": "  "}')
    assert not empty_call('{"code": "print(1)"}') and not empty_call('{"code": ')  # (unreadable: dropped instead)
    replies = [{"tool_calls": [{"name": "python", "arguments": "{}"}]}, {"code": "print(1)"},
               {"tool_calls": [{"name": "python", "arguments": '{"code": ""}'}]}, {"code": "print(2)"}]
    with StubServer(FixedModel(replies)) as url:
        client = ModelClient(url, ModelConfig(name="stub", retries=0), session="e")
        stats = [client.chat([{"role": "user", "content": f"turn {i}"}]).stats() for i in range(4)]
    assert [s["empty_calls"] for s in stats] == [1, 0, 1, 0] and all(s["tool_calls"] == 1 for s in stats)
    w = RecordWriter(tmp_path / "g.jsonl")
    w.header(game_id="g", title="g", baselines=None, obs=None, policy="llm", seed=0)
    for i, st in enumerate(stats):
        w.event("model", "reply", st | {"turn": i, "call": 0})
    w.end("policy_done", 0, 0, "NOT_FINISHED")
    s = summarize([read_record(tmp_path / "g.jsonl")])
    assert s["tool_call_failure_rate"] == 0.5
