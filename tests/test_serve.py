"""`duck serve`, with a stand-in `vllm` executable that serves the stub server.

The stand-in accepts vLLM's command line, prints it to its log, waits a little as if loading
weights, and serves an OpenAI-compatible endpoint; FAKE_VLLM_MODE makes it fail to start,
crash later, fail the smoke chat, ignore SIGTERM, or take a minute to load."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from duck.config import profiles
from duck.config import ConfigError, ModelConfig, at_rung, load_config, with_values
from duck.llm.client import ModelClient
from duck.llm.serve import ServeError, VLLMServer, command

ROOT = Path(__file__).resolve().parent.parent

STAND_IN = f"""#!{sys.executable}
import argparse, json, os, signal, sys, threading, time
sys.path.insert(0, {str(ROOT)!r})
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer

p = argparse.ArgumentParser()
p.add_argument("cmd"); p.add_argument("model")
p.add_argument("--port", type=int); p.add_argument("--host"); p.add_argument("--served-model-name")
args, rest = p.parse_known_args()
mode = os.environ.get("FAKE_VLLM_MODE", "ok")
print("argv", json.dumps(sys.argv), flush=True)
print("sampler", os.environ.get("VLLM_USE_FLASHINFER_SAMPLER"), "gpu", os.environ.get("CUDA_VISIBLE_DEVICES"),
      flush=True)
if mode == "fail_start":
    print("torch.OutOfMemoryError: CUDA out of memory", flush=True)
    sys.exit(3)
print("pid", os.getpid(), flush=True)
time.sleep(60 if mode == "slow_start" else 0.3)  # loading weights
def reply(body):
    if mode == "crash_later":  # dies a moment after its first chat (the smoke test) was answered
        threading.Timer(0.3, lambda: (print("engine core died", flush=True), os._exit(7))).start()
    return {{"status": 500}} if mode == "bad_smoke" else {{"content": "OK"}}
server = StubServer(FixedModel([reply], loop=True), port=args.port, host=args.host,
                    model_name=args.served_model_name)
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=server.httpd.shutdown).start())
server.httpd.serve_forever(poll_interval=0.05)
print("stopped cleanly", flush=True)
"""


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def cfg(tmp_path):
    exe = tmp_path / "vllm"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    c = load_config(overrides=[f"model.serve.executable={exe}", f"model.serve.port={_free_port()}",
                               f"model.serve.log_path={tmp_path / 'vllm.log'}", "model.serve.ready_timeout_s=20",
                               "model.backoff_s=0.05"])
    return c


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_command_has_the_flags_the_field_found_stable(cfg):
    cfg = with_values(cfg, {"model.profile": "qwen3.6-27b"})  # the window and memory share come from its plan
    argv, env = command(cfg.model.serve, "Qwen3.6-27B-FP8")
    line = " ".join(argv)
    assert argv[1:3] == ["serve", "Qwen/Qwen3.6-27B-FP8"]
    for flag in ("--tool-call-parser qwen3_coder", "--reasoning-parser qwen3", "--enable-prefix-caching",
                 "--enable-auto-tool-choice", "--max-model-len 65536", "--gpu-memory-utilization 0.92",
                 "--max-num-batched-tokens 8192", "--stream-interval 1", "--served-model-name Qwen3.6-27B-FP8",
                 "--enable-prompt-tokens-details", "--linear-backend cutlass"):
        assert flag in line, flag
    assert "--chat-template" not in argv and "--kv-cache-dtype" not in argv  # BF16 KV on 3.6 (vllm#26646)
    assert "--speculative-config" not in argv and "--engram-config" not in argv
    assert command(cfg.model.serve, "m", chat_template="/t.jinja")[0][-2:] == ["--chat-template", "/t.jinja"]
    assert "--compilation-config" not in argv and "--enforce-eager" not in argv  # vLLM 0.33's own graphs
    assert json.loads(_flag(argv, "--limit-mm-per-prompt"))["image"] >= 32
    assert json.loads(_flag(argv, "--mm-processor-kwargs")) == {"max_pixels": 640 * 640}
    assert json.loads(_flag(argv, "--default-chat-template-kwargs")) == {"preserve_thinking": True}
    assert env == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    cfg.model.serve.kv_cache_dtype = "fp8"
    assert "--kv-cache-dtype" in command(cfg.model.serve, "m")[0]


@pytest.mark.parametrize("profile, mtp, engram, kv, linear, template", [
    ("flash-next", 3, True, "fp8", None, "qwen3.8"),
    ("qwen3.8-27b", 3, False, "fp8", "cutlass", "qwen3.8"),
    ("qwen3.6-27b", 0, False, None, "cutlass", "qwen3.6")])
def test_each_profile_gets_its_own_flags(cfg, profile, mtp, engram, kv, linear, template):
    """MTP, FP8 KV, the n-gram table's offload and the template copy per profile, and the
    plan's window and seqs (duck.config.profiles)."""
    c = with_values(cfg, {"model.profile": profile})
    argv, _ = command(c.model.serve, c.model.name)
    spec = _flag(argv, "--speculative-config")
    assert (json.loads(spec) if spec else None) == ({"method": "mtp", "num_speculative_tokens": mtp} if mtp else None)
    assert (_flag(argv, "--engram-config") is not None) == engram
    if engram:
        assert json.loads(_flag(argv, "--engram-config")) == {"cpu_offload": True}
    assert _flag(argv, "--kv-cache-dtype") == kv and _flag(argv, "--linear-backend") == linear
    assert int(_flag(argv, "--max-model-len")) == c.plan.window and int(_flag(argv, "--max-num-seqs")) == c.plan.max_num_seqs
    assert "--mamba-cache-mode" not in argv  # deprecated in 0.33: prefix caching sets the hybrid cache
    assert c.model.serve.chat_template_family == template
    # Turning MTP off, and a finer prefix-cache grid, are one field each.
    off = with_values(c, {"model.serve.mtp_tokens": 0, "model.serve.prefix_match_unit": 64})
    argv_off, _ = command(off.model.serve, off.model.name)
    assert "--speculative-config" not in argv_off and _flag(argv_off, "--prefix-match-unit") == "64"


@pytest.mark.parametrize("rung, mtp, graphs", [
    (0, 3, None), (1, 0, None), (2, 0, '{"cudagraph_mode": "PIECEWISE"}'), (3, 0, "--enforce-eager")])
def test_each_rung_of_the_restart_ladder_is_planned_and_printed(cfg, capsys, rung, mtp, graphs):
    """`duck serve --dry-run --rung N`: the rung's name, its plan (MTP off frees the drafter's
    widened state) and its command line; a rung the ladder lacks is one line, exit 2."""
    from duck.cli import main
    assert main(["serve", "--dry-run", "--json", "--rung", str(rung)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# rung {rung}: {profiles.LADDER[rung].name}"
    plan = json.loads(next(line for line in out if line.startswith('{"plan"')))["plan"]
    assert plan["mtp_tokens"] == mtp and plan["slots"] == 10
    argv = shlex.split(out[-1])
    assert (_flag(argv, "--speculative-config") is not None) == bool(mtp)
    assert ("--enforce-eager" in argv) == (graphs == "--enforce-eager")
    assert _flag(argv, "--compilation-config") == (graphs if graphs and graphs.startswith("{") else None)
    assert at_rung(cfg, rung).plan.state_gib <= cfg.plan.state_gib
    assert main(["serve", "--dry-run", "--rung", "4"]) == 2
    assert capsys.readouterr().err.strip().endswith("rung 4: the flash-next profile's restart ladder has rungs 0-3")


def test_the_hosted_profile_has_no_ladder(cfg):
    with pytest.raises(ConfigError, match="none"):
        at_rung(with_values(cfg, {"model.profile": "hosted"}), 1)


def test_dry_run_prints_the_plan_and_refuses_a_plan_that_does_not_fit(cfg, capsys):
    from duck.cli import main
    assert main(["serve", "--dry-run", "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    plan = json.loads(next(line for line in out if line.startswith('{"plan"')))["plan"]
    assert plan["profile"] == "flash-next" and plan["slots"] == 10 and plan["problems"] == []
    assert any(line.startswith("# KV fp8: 12288 B a token") for line in out)
    assert any(line.startswith("# slots 10 (fit 10), --max-num-seqs 11, MTP 3") for line in out)
    assert out[-1].split()[1:3] == ["vllm", "serve"] or "serve" in out[-1]
    # 16 games at 128K do not fit the pool: an error (exit 2) with the problem, before anything starts.
    assert main(["serve", "--dry-run", "--set", "scheduler.slots=16"]) == 2
    captured = capsys.readouterr()
    assert "# PROBLEM: 16 slots" in captured.out and "does not fit" in captured.err
    assert main(["serve", "--set", "scheduler.slots=16", "--executable", "/nonexistent/vllm"]) == 2
    assert "does not fit" in capsys.readouterr().err


def test_starts_becomes_ready_serves_and_stops_cleanly(cfg):
    server = VLLMServer(cfg.model, gpu="0").start()
    try:
        ready = server.wait_ready(poll_s=0.1)
        assert 0.2 < ready < 20
        reply = ModelClient(server.url, ModelConfig(name=cfg.model.name)).chat([{"role": "user", "content": "hi"}])
        assert reply.content == "OK"
    finally:
        code = server.stop(grace_s=5)
    assert code == 0 and not server.alive()
    text = Path(cfg.model.serve.log_path).read_text()
    assert "--reasoning-parser" in text and "sampler 0 gpu 0" in text and "stopped cleanly" in text


def test_a_crash_at_start_is_reported_with_the_log(cfg, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail_start")
    server = VLLMServer(cfg.model).start()
    with pytest.raises(ServeError, match="exited with code 3") as e:
        server.wait_ready(poll_s=0.1)
    assert "CUDA out of memory" in str(e.value)


def test_a_crash_after_ready_is_detected(cfg, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "crash_later")
    with VLLMServer(cfg.model) as server:
        for _ in range(50):
            if not server.alive():
                break
            time.sleep(0.05)
        assert not server.alive()
        with pytest.raises(ServeError, match="code 7"):
            server.check()
        assert "engine core died" in server.log_tail()


def test_a_failing_smoke_chat_means_not_ready(cfg, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "bad_smoke")
    server = VLLMServer(cfg.model).start()
    try:
        with pytest.raises(ServeError, match="smoke chat failed"):
            server.wait_ready(poll_s=0.1)
    finally:
        server.stop(grace_s=5)


def test_stop_kills_a_server_that_ignores_sigterm(cfg, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "ignore_term")
    server = VLLMServer(cfg.model).start()
    server.wait_ready(poll_s=0.1)
    t0 = time.monotonic()
    code = server.stop(grace_s=0.5)
    assert code == -signal.SIGKILL and time.monotonic() - t0 < 15  # its 0.5 s of grace, not forever


def test_duck_serve_command_line(cfg, tmp_path, capsys):
    from duck.cli import main
    s = cfg.model.serve
    assert main(["serve", "--dry-run", "--executable", s.executable, "--port", str(s.port), "--gpus", "0,1"]) == 0
    dry = [d for d in capsys.readouterr().out.splitlines() if not d.startswith("#")]  # (the plan's lines)
    assert len(dry) == 2 and all("VLLM_USE_FLASHINFER_SAMPLER=0" in d and "--tool-call-parser" in d for d in dry)
    assert f"--port {s.port + 1}" in dry[1]
    proc = subprocess.Popen([sys.executable, "-m", "duck.cli", "serve", "--executable", s.executable,
                             "--port", str(s.port), "--log-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["ready"] and first["urls"] == [f"http://127.0.0.1:{s.port}"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped cleanly" in (tmp_path / "vllm_0.log").read_text()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=1).close()


def test_duck_serve_stops_when_told_while_the_model_still_loads(cfg, tmp_path):
    """A job's cleanup (experiments/slurm/ab-shard.sbatch) sends SIGTERM during vLLM's
    minutes of loading: duck serve stops the server it started instead of waiting for it."""
    s = cfg.model.serve
    proc = subprocess.Popen([sys.executable, "-m", "duck.cli", "serve", "--executable", s.executable,
                             "--port", str(s.port), "--log-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, FAKE_VLLM_MODE="slow_start"))
    log, pid = tmp_path / "vllm_0.log", None
    try:
        deadline = time.monotonic() + 20
        while pid is None and time.monotonic() < deadline:
            lines = log.read_text().splitlines() if log.exists() else []
            pid = next((int(x.split()[1]) for x in lines if x.startswith("pid ")), None)
            time.sleep(0.1)
        assert pid is not None, "the stand-in did not start"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM and time.monotonic() - t0 < 15
        assert json.loads(proc.stdout.readline()) == {"ready": False,
                                                     "error": f"stopped by signal {int(signal.SIGTERM)} while starting"}
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


QWEN36 = "{%- if preserve_thinking is defined and preserve_thinking is true %}keep{% endif %}"
QWEN35 = "{%- if loop.index0 > ns.last_query_index %}think{% endif %}"


def test_chat_template_is_the_models_own_only_when_it_has_preserve_thinking(tmp_path, caplog):
    from duck.llm.serve import pick_chat_template
    model, copy = tmp_path / "model", tmp_path / "copy.jinja"
    model.mkdir()
    copy.write_text(QWEN36)
    serve = load_config(overrides=[f"model.serve.model_path={model}",
                                   f"model.serve.fallback_chat_template={copy}"]).model.serve
    (model / "chat_template.jinja").write_text(QWEN36)
    assert pick_chat_template(serve)[0] is None  # the model's own
    (model / "chat_template.jinja").write_text(QWEN35)
    path, why = pick_chat_template(serve)
    assert path == str(copy) and "without preserve_thinking" in why
    (model / "chat_template.jinja").unlink()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": QWEN36}))
    assert pick_chat_template(serve)[0] is None  # tokenizer_config.json's template counts too
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "default",
                                                                                "template": QWEN35}]}))
    assert pick_chat_template(serve)[0] == str(copy)
    copy.unlink()
    path, why = pick_chat_template(serve)
    assert path is None and "prefix-cache misses" in why  # no copy: say so, serve the model's


def test_the_server_is_started_with_the_template_copy_when_the_model_lacks_it(cfg, tmp_path):
    model, copy = tmp_path / "model", tmp_path / "qwen3.6" / "chat_template.jinja"
    model.mkdir()
    copy.parent.mkdir()
    (model / "chat_template.jinja").write_text(QWEN35)
    copy.write_text(QWEN36)
    cfg.model.serve.model_path, cfg.model.serve.fallback_chat_template = str(model), str(copy)
    server = VLLMServer(cfg.model).start()
    try:
        server.wait_ready(poll_s=0.1)
    finally:
        server.stop()
    argv = json.loads(next(line for line in server.log_tail(50).splitlines() if line.startswith("argv "))[5:])
    assert argv[argv.index("--chat-template") + 1] == str(copy)
    assert "without preserve_thinking" in server.chat_template_choice


def _checkpoint(folder: Path, keys: list[str] | None) -> Path:
    """A model folder with a model.safetensors.index.json mapping `keys` (None: no index)."""
    folder.mkdir(parents=True)
    if keys is not None:
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": 1}, "weight_map": {k: "model-00001-of-00002.safetensors" for k in keys}}))
    return folder


TARGET = ["model.language_model.layers.0.mlp.gate.weight", "lm_head.weight"]


@pytest.mark.parametrize("keys, mtp, said", [
    (TARGET + ["mtp.layers.0.mlp.experts.0.down_proj.qweight", "mtp.fc.weight"], 3, "maps 2 mtp. tensors"),
    (TARGET + ["model.mtp.norm.weight"], 3, "maps 1 mtp. tensors"),
    (TARGET, 0, "no mtp. tensors in its model.safetensors.index.json"),
    (None, 0, "no readable model.safetensors.index.json")])
def test_mtp_is_served_only_when_the_checkpoint_holds_the_drafter(tmp_path, keys, mtp, said):
    """Issue 35: `method: mtp` loads the drafter from the checkpoint's own `mtp.*` tensors and
    vLLM 0.33 does not check they exist for a quantized one. `duck serve --dry-run` (a real
    subprocess) on a folder without them plans and prints the command without MTP, with a
    warning line and `mtp_check` in the plan; with them, as the profile says."""
    folder = _checkpoint(tmp_path / "ckpt", keys)
    p = subprocess.run([sys.executable, "-m", "duck.cli", "serve", "--dry-run", "--json", "--model-path", str(folder)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    plan = json.loads(next(line for line in out if line.startswith('{"plan"')))["plan"]
    argv = shlex.split(out[-1])
    assert plan["mtp_tokens"] == mtp and said in plan["mtp_check"] and argv[argv.index("serve") + 1] == str(folder)
    assert (_flag(argv, "--speculative-config") is not None) == bool(mtp)
    assert any(line.startswith("# MTP ") and said in line for line in out)
    warned = [line for line in p.stderr.splitlines() if "MTP off" in line]
    assert len(warned) == (0 if mtp else 1) and (mtp or "untrained head" in warned[0])
    if not mtp:  # the drafter's widened state is not planned either
        assert plan["state_gib"] < load_config().plan.state_gib


def test_the_server_starts_without_mtp_when_the_checkpoint_lacks_the_drafter(cfg, tmp_path):
    """The notebook and `duck doctor` start VLLMServer from a config: the check is there too."""
    cfg.model.serve.model_path = str(_checkpoint(tmp_path / "ckpt", TARGET))
    assert cfg.model.serve.mtp_tokens == 3
    server = VLLMServer(cfg.model).start()
    try:
        server.wait_ready(poll_s=0.1)
    finally:
        server.stop()
    argv = json.loads(next(line for line in server.log_tail(50).splitlines() if line.startswith("argv "))[5:])
    assert "--speculative-config" not in argv and server.mtp_check.off and cfg.model.serve.mtp_tokens == 3
