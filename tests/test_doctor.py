"""`duck doctor` end to end on CPU against the rehearsal's stand-in vLLM, and its metrics parser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from duck.sandbox.wall import isolation

from duck.llm import metrics as vllm_metrics
from devkit.doctor.doctor import LIMITS, lock_pin, vllm_import
from devkit.rehearse.layout import write_standin

ROOT = Path(__file__).resolve().parent.parent
# Whether this machine lets a process have a network namespace of its own (root or user namespaces).
NETNS = any(shutil.which("unshare") and subprocess.run(["unshare", *flag, "true"], capture_output=True).returncode == 0
            for flag in (["-n"], ["-rn"]))
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
    from devkit.doctor.operating import checks, decode_limit
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
    assert set(c) == {"decode_tokens_per_s", "prefix_cache_hit_rate", "boot_s", "tool_call_failure_rate",
                      "mtp_tokens_per_step"}  # (the profile drafts 3 MTP tokens)
    assert c["mtp_tokens_per_step"]["ok"] and c["mtp_tokens_per_step"]["limit"] == ">= 1.5"
    assert steps["vllm_log"]["ok"] and steps["vllm_log"]["failing"] == []  # the stand-in fetches and builds nothing
    net = steps["network"]
    if NETNS:  # the doctor, its server and games ran with no route out, the stand-in answering over loopback
        assert net["ok"] and net["isolated"] and net["interfaces"] == ["lo"] and net["default_routes"] == []
        assert net["probe"] != "connected" and "unreachable" in net["probe"].lower()
    else:  # (a container without namespaces: said, and the doctor fails on it)
        assert not net["ok"] and "no network namespace" in net["error"] and "network" in r.stdout.splitlines()[-1]
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
    from devkit.doctor.turns import summarize
    from duck.llm.client import ModelClient, empty_call
    from duck.play.record import RecordWriter, read_record
    from devkit.stub.models import FixedModel
    from devkit.stub.server import StubServer
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


# -- Issue 35: the boot without a network, the soak, MTP's acceptance, the graphs -----------

from devkit.doctor import offline  # noqa: E402
from devkit.doctor.soak import start_rung  # noqa: E402
from devkit.doctor.sweep import GRAPHS_MARGIN, _decide  # noqa: E402

SITE = next(VENV.glob("lib/python*/site-packages"), None) if VENV.exists() else None
# Lines as FlashInfer 0.7.2 (its flashinfer.jit logger's format) and vLLM 0.33 write them.
FETCH_LINES = [
    "2026-12-02 10:01:02,345 - INFO - core.py:594 - flashinfer.jit: Building JIT module norm; this can take "
    "several minutes on first use.",
    "2026-12-02 10:01:09,001 - INFO - cubin_loader.py:231 - flashinfer.jit: Fetching fmha/kernel.cubin from "
    "https://edge.urm.nvidia.com/artifactory/sw-kernelinferencelibrary-public-generic-local/fmha/kernel.cubin",
    "2026-12-02 10:01:09,101 - WARNING - cubin_loader.py:120 - flashinfer.jit: Downloading https://edge.urm.nvidia"
    ".com/x: attempt 1 failed: HTTPSConnectionPool(host='edge.urm.nvidia.com', port=443): Max retries exceeded "
    "with url: /x (Caused by NewConnectionError('[Errno 101] Network is unreachable'))",
    "(EngineCore pid=311) WARNING 12-02 10:00:40 [flashinfer.py:151] FlashInfer's precompiled kernels are missing "
    "or do not match flashinfer-python 0.7.2 (flashinfer-cubin not installed, flashinfer-jit-cache not installed).",
]
CLEAN_LINES = [
    "(APIServer pid=1) INFO 12-02 10:00:01 [api_server.py:101] vLLM API server version 0.33.0",
    "(EngineCore pid=311) INFO 12-02 10:00:30 [qwen_gdn_linear_attn.py:300] Using FlashInfer GDN prefill kernel "
    "(head_k_dim=128).",
    "(EngineCore pid=311) WARNING 12-02 10:00:31 [flashinfer.py:99] FlashInfer kernels are disabled: flashinfer-cubin "
    "is not installed and nvcc (CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda) or ninja (PATH) is missing.",
]


def test_the_vllm_log_scan_finds_downloads_compiles_and_missing_kernels():
    clean = offline.scan("\n".join(CLEAN_LINES))
    assert clean["ok"] and clean["failing"] == [] and clean["counts"] == {"note": 1}
    bad = offline.scan("\n".join(CLEAN_LINES + FETCH_LINES))
    assert not bad["ok"] and bad["failing"] == ["download", "compile", "kernels"]
    assert bad["counts"] == {"note": 1, "compile": 1, "download": 2, "kernels": 1}
    assert bad["lines"]["compile"] == [FETCH_LINES[0]]
    net = offline.scan("OSError: [Errno -3] Temporary failure in name resolution")
    assert net["failing"] == ["network"]


@pytest.mark.skipif(SITE is None, reason=f"no vLLM venv at {VENV} (bash scripts/vllm-venv.sh)")
def test_the_log_signs_are_the_pinned_venvs_own_messages():
    """Each sign's fragment is in the log call of the file it names, in the pinned vLLM's venv."""
    for sign in offline.SIGNS:
        if sign.source:
            assert sign.literal in (SITE / sign.source).read_text(), sign


def _doctor(tmp_path: Path, bundled: Path, *extra: str, env: dict[str, str] | None = None,
            log_lines: list[str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """`duck doctor` against the rehearsal's stand-in (which first prints `log_lines` to its log)."""
    exe = write_standin(tmp_path / "bin" / "standin")
    if log_lines is not None:  # a `vllm` that says what a real boot would, then serves
        wrapper = tmp_path / "bin" / "vllm"
        wrapper.write_text("#!/bin/sh\n" + "".join(f"echo {json.dumps(x)}\n" for x in log_lines) + f'exec "{exe}" "$@"\n')
        wrapper.chmod(0o755)
        exe = wrapper
    out = tmp_path / "doctor"
    r = subprocess.run([sys.executable, "-m", "duck.cli", "doctor", "--executable", str(exe), "--games", str(bundled),
                        "--out", str(out), "--vllm-python", str(tmp_path / "no-venv" / "python"),
                        "--set", "model.serve.ready_timeout_s=60", "model.timeout_s=20", *extra],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "DUCK_STANDIN_LATENCY": "speed=20", "DUCK_STANDIN_BOOT_S": "0.5", **(env or {})})
    assert (out / "doctor.json").exists(), r.stderr[-3000:]
    return r, json.loads((out / "doctor.json").read_text())


def test_the_soak_starts_the_submission_on_rung_0_when_mtp_holds(tmp_path, bundled):
    """`duck doctor --soak`: Duck-shaped conversations (the traces' turns, sharing the system
    prompt) at once through the real client for the soak's minutes, with the stand-in's MTP
    (2.7 tokens a step) and prefix cache; no crash, no failed request: rung 0."""
    r, doc = _doctor(tmp_path, bundled, "--soak", "0.2", "--streams", "3")
    soak, steps = doc["steps"]["soak"], doc["steps"]
    print(json.dumps({k: v for k, v in soak.items() if k != "metrics_delta"}, default=str))
    assert "play" not in steps and soak["ok"] and not soak["crashed"] and soak["errors"] == 0
    assert soak["streams"] == 3 and soak["conversations"] >= 3 and soak["requests"] >= 6 and soak["wall_s"] >= 11.4
    assert soak["mtp"]["tokens_per_step"] == pytest.approx(2.7, abs=0.15) and soak["decode_tokens_per_s"] > 0
    assert soak["prefix_cache_hit_rate"] > 0.5  # every request extends the last; the system prompt is shared
    assert soak["tool_call_failure_rate"] == 0 and soak["max_prompt_tokens"] > soak["median_prompt_tokens"] > 0
    if (offline_traces := ROOT.parent / "shared" / "duck-traces" / "turns").is_dir():
        assert soak["shapes"] == "the Duck traces", offline_traces
    assert doc["figures"]["mtp"] == soak["mtp"] and doc["checks"]["mtp_tokens_per_step"]["ok"]
    assert doc["start_rung"]["rung"] == 0 and doc["start_rung"]["set"] == ["kaggle.start_rung=0"]
    assert "start on rung 0" in r.stdout.splitlines()[-1] and (tmp_path / "doctor" / "soak.json").exists()


def test_low_acceptance_means_rung_1_and_a_compile_in_the_log_fails_the_doctor(tmp_path, bundled):
    """MTP at 1.2 tokens a step (an untrained draft head's figure): the doctor's MTP check fails
    and the soak says rung 1 (MTP off); a FlashInfer JIT build in vllm.log fails the doctor
    loudly, named in its verdict."""
    r, doc = _doctor(tmp_path, bundled, "--soak", "0.1", "--streams", "2",
                     env={"DUCK_STANDIN_LATENCY": "speed=20,step_tokens=1.2"}, log_lines=FETCH_LINES[:1])
    assert doc["steps"]["soak"]["ok"] and doc["steps"]["soak"]["mtp"]["tokens_per_step"] < 1.5
    assert doc["checks"]["mtp_tokens_per_step"]["ok"] is False
    assert doc["start_rung"]["rung"] == 1 and "MTP accepted" in doc["start_rung"]["why"]
    assert doc["start_rung"]["set"] == ["kaggle.start_rung=1"]
    line = doc["start_rung"]["notebook"]
    assert line == 'os.environ.setdefault("DUCK_KAGGLE__START_RUNG", "1")'
    # ... the line notebook.py carries (with 0), which the notebook reads: its first boot's rung
    notebook = (Path(__file__).resolve().parent.parent / "notebook.py").read_text()
    assert line.replace('"1"', '"0"') in notebook
    from duck.config import load_config
    assert load_config(env={"DUCK_KAGGLE__START_RUNG": "1"}).kaggle.start_rung == 1
    log = doc["steps"]["vllm_log"]
    assert log["ok"] is False and log["failing"] == ["compile"]
    assert "Building JIT module norm" in log["logs"]["vllm.log"]["lines"]["compile"][0]
    verdict = r.stdout.splitlines()[-1]
    assert r.returncode == 1 and "vllm_log (compile)" in verdict and "start on rung 1" in verdict


def test_a_server_that_dies_during_the_soak_means_rung_1(tmp_path, bundled):
    r, doc = _doctor(tmp_path, bundled, "--soak", "0.5", "--streams", "2", env={"DUCK_STANDIN_DIE_AFTER_S": "5"})
    soak = doc["steps"]["soak"]
    assert soak["crashed"] and not soak["ok"] and soak["wall_s"] < 25
    assert doc["start_rung"]["rung"] == 1 and "died" in doc["start_rung"]["why"]


def test_the_start_rung_rule():
    good = {"crashed": False, "errors": 0, "wall_s": 1800.0, "minutes": 30, "requests": 900, "streams": 10,
            "mtp": {"tokens_per_step": 2.7}}
    assert start_rung(good, 3, 1.5)[0] == 0
    assert start_rung(dict(good, errors=2), 3, 1.5) == (1, "2 requests failed during the soak (errors or "
                                                            "time-outs: a wedge)")
    assert start_rung(dict(good, wall_s=600.0), 3, 1.5)[0] == 1
    assert start_rung(dict(good, mtp=None), 3, 1.5)[0] == 1  # drafting, but no counters: not measured
    assert start_rung(dict(good, crashed=True, mtp=None), 0, 1.5)[0] == 0  # no MTP to turn off


def _row(graphs: str, decode: float | None, ok: bool = True, slots: int = 10, mtp: int = 3) -> dict:
    return {"boot": graphs, "graphs": graphs, "mtp_tokens": mtp, "slots": slots, "context_tokens": 131072,
            "figures": {"decode_tokens_per_s": decode}, "stable": ok, "ok": ok}


def test_the_graphs_are_chosen_by_decode_and_stability(tmp_path):
    from duck.config import load_config
    cfg = load_config()
    planned = (cfg.plan.slots, cfg.plan.context_tokens)

    def choice(*rows: dict) -> dict:
        return _decide(cfg, tmp_path, list(rows), 1.5, 100.0, planned, None)
    faster = (1 + GRAPHS_MARGIN) * 700 + 1
    doc = choice(_row("default", 700.0), _row("PIECEWISE", faster), _row("eager", 300.0))
    assert doc["graphs"]["choice"] == "PIECEWISE" and doc["set"][-1] == "model.serve.cudagraph_mode=PIECEWISE"
    assert doc["graphs"]["figures"]["eager"]["decode_tokens_per_s"] == 300.0  # what rung 3 costs
    doc = choice(_row("default", 700.0), _row("PIECEWISE", 720.0))  # within the margin: vLLM's own default
    assert doc["graphs"]["choice"] == "default" and not any("cudagraph" in x for x in doc["set"])
    assert doc["best"] == {"slots": 10, "context_tokens": 131072, "mtp_tokens": 3}
    doc = choice(_row("default", 900.0, ok=False), _row("PIECEWISE", 650.0))  # the default wedged or crashed
    assert doc["graphs"]["choice"] == "PIECEWISE" and doc["best"] is None
    doc = choice(_row("default", 700.0), _row("PIECEWISE", 900.0, ok=False))  # faster but not stable
    assert doc["graphs"]["choice"] == "default"


def test_the_sweep_boots_each_graphs_mode_against_the_standin(tmp_path, bundled, monkeypatch):
    """`duck doctor --sweep` on the CPU: one boot per BOOTS entry (MTP as planned and off on
    vLLM's own graphs, then PIECEWISE and eager at the planned point), each with its flags,
    played, its log read; the decision written to sweep.json (two tiny points here)."""
    from duck.config import load_config
    from devkit.doctor import sweep as sw
    monkeypatch.setattr(sw, "POINTS", ((2, 16384),))
    monkeypatch.setenv("DUCK_STANDIN_LATENCY", "speed=20")
    monkeypatch.setenv("DUCK_STANDIN_BOOT_S", "0.2")
    exe = write_standin(tmp_path / "bin" / "vllm")
    cfg = load_config(overrides=[f"model.serve.executable={exe}", "agent.fallback=null", "scheduler.slots=2",
                                 "agent.context_tokens=16384", "model.serve.ready_timeout_s=60", "model.timeout_s=20"])
    doc = sw.sweep(cfg, tmp_path / "sweep", bundled, None, 0.05)
    rows = doc["points"]
    assert [(r["graphs"], r["mtp_tokens"]) for r in rows] == [("default", 3), ("default", 0), ("PIECEWISE", 3),
                                                             ("eager", 3)]
    assert all(r["figures"]["decode_tokens_per_s"] and r["stable"] and r["vllm_log"]["failing"] == [] for r in rows)
    argv = [(tmp_path / "sweep" / f"vllm-boot{k}.log").read_text().splitlines()[1] for k in range(4)]
    assert "--speculative-config" in argv[0] and "--compilation-config" not in argv[0]
    assert "--speculative-config" not in argv[1]
    assert '--compilation-config {"cudagraph_mode": "PIECEWISE"}' in argv[2] and "--enforce-eager" in argv[3]
    g = doc["graphs"]
    assert set(g["figures"]) == {"default", "PIECEWISE", "eager"} and g["at"] == [2, 16384]
    assert g["choice"] in ("default", "PIECEWISE") and json.loads((tmp_path / "sweep" / "sweep.json").read_text())
