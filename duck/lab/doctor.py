"""`duck doctor`: is this GPU machine ready to play, and how fast (issue 12)?

In order, each step recorded with what it found and how long it took; a failed step is
reported and the doctor goes on wherever the next step can still run:

1. `gpu`: the NVIDIA driver and CUDA version (`nvidia-smi`), checked against what
   `kaggle-dataset/vllm.lock` needs (duck.kaggle.inputs.check_driver, the notebook's check);
2. `vllm_import`: `import vllm, torch` in vLLM's own venv (the python beside the `vllm`
   executable, `--vllm-python`, `DUCK_VLLM_VENV` or ~/.cache/duck-arc3/vllm-<pin>), its
   version against the lock's pin, torch's CUDA build and whether it sees a GPU;
3. `serve`: `duck serve`'s server (duck.llm.serve.VLLMServer, the configured command) started
   and timed until `/v1/models` lists the model and a smoke chat succeeds;
4. `smoke_chat`: one more short chat, timed;
5. `play`: three games (the bundled ones, or `--games DIR`, or `--only`) played at once by the
   model through the scheduler's runner, the agent and the kernel, for `--game-seconds` each;
6. `isolation`: the sandbox's isolation layers on this machine (`duck.sandbox.isolation.report()`,
   the same as in every record header).

Figures (`figures` in the JSON): decode throughput (generated tokens per second of play, from
the server's `/metrics`; and per stream, from each call's decode time), the prefix-cache hit
rate (from `/metrics`: vLLM 0.19's `vllm:prefix_cache_hits` / `vllm:prefix_cache_queries`
over the play), the tool-call failure rate and the median model latency per call (from the
records), the KV cache's capacity in tokens (`vllm:cache_config_info`'s blocks x block size)
and the harness share of wall time (duck.lab.turns). Printed and written to
`OUT/doctor.json`; exit 0 when every step held.

Here, without a GPU, `--executable` takes the rehearsal's stand-in vLLM
(duck.testing.rehearse.layout.write_standin): the same code path, small figures
(tests/test_doctor.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from duck.config import load_config
from duck.sandbox import isolation as sandbox_isolation
from duck.game.gateway import free_port
from duck.game.source import GameSource
from duck.kaggle.inputs import check_driver, lock_driver_requirement
from duck.lab import vllm_metrics
from duck.lab.turns import calls, summarize
from duck.paths import BUNDLED_GAMES, REPO
from duck.play.record import read_record

log = logging.getLogger(__name__)

LOCK = REPO / "kaggle-dataset" / "vllm.lock"
IMPORT_CHECK = ("import json, vllm, torch; print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, "
                "'torch_cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available()}))")


def step(steps: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one step; its result (with `ok`, `seconds`, or the error) goes into `steps`."""
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as e:  # a failed step is a finding, not a crash
        out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    out.setdefault("ok", True)
    out["seconds"] = round(time.monotonic() - t0, 2)
    steps[name] = out
    log.info("doctor: %s: %s", name, out)
    return out


def gpu(lock: Path) -> dict[str, Any]:
    ok, message = check_driver(lock)
    out: dict[str, Any] = {"ok": ok, "message": message, "needs": lock_driver_requirement(lock)}
    try:
        text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
        m = re.search(r"Driver Version:\s*([\d.]+).*?CUDA Version:\s*([\d.]+)", text, re.S)
        if m:
            out["driver"], out["cuda"] = m.group(1), m.group(2)
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def lock_pin(lock: Path) -> str | None:
    try:
        m = re.search(r"^vllm==(\S+)", lock.read_text(), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


def vllm_python(executable: str, explicit: str | None, pin: str | None) -> Path | None:
    """The python of vLLM's venv: explicit, beside the `vllm` executable, DUCK_VLLM_VENV, or
    the conformance venv's default place."""
    if explicit:
        return Path(explicit)
    exe = shutil.which(executable)
    if exe and (Path(exe).parent / "python").exists():
        return Path(exe).parent / "python"
    venv = os.environ.get("DUCK_VLLM_VENV") or str(Path.home() / ".cache" / "duck-arc3" / f"vllm-{pin or '0.19.0'}")
    py = Path(venv) / "bin" / "python"
    return py if py.exists() else None


def vllm_import(python: Path | None, pin: str | None, timeout_s: float = 600.0) -> dict[str, Any]:
    if python is None or not python.exists():
        return {"ok": False, "error": f"no vLLM venv found (python {python}); make one with "
                                      "bash scripts/vllm-venv.sh or pass --vllm-python"}
    r = subprocess.run([str(python), "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        return {"ok": False, "python": str(python), "error": (r.stderr or r.stdout).strip()[-1500:]}
    found = json.loads(r.stdout.strip().splitlines()[-1])
    ok = pin is None or found["vllm"] == pin
    return found | {"ok": ok, "python": str(python), "lock_pin": pin,
                    **({} if ok else {"error": f"vLLM {found['vllm']} is not the locked {pin}"})}


def isolation() -> dict[str, Any]:
    """The sandbox's isolation layers (which are on here, and why any is off)."""
    return {"ok": True, "layers": sandbox_isolation.report()}


def play(cfg: Any, url: str, games: Path, only: list[str] | None, seconds: float, out: Path,
         n: int = 3) -> dict[str, Any]:
    """`n` games at once through the scheduler's runner, the agent (no fallback) and the kernel."""
    # (Here, not at the top: the policies bring the model client, which `duck --help` needs not.)
    from duck.policies import make_policy
    from scheduler.policy import make_policy as make_schedule
    from scheduler.runner import run_schedule
    source = GameSource.offline(games)
    ids = source.game_ids(only)[:n]
    records = out / "records"
    records.mkdir(parents=True, exist_ok=True)
    for old in records.glob("*.jsonl"):
        old.unlink()
    before = vllm_metrics.fetch(url)
    t0 = time.monotonic()
    run_schedule(make_schedule("fixed", cfg.scheduler), ids, slots=len(ids), budget_s=seconds, source=source,
                 play_policy=lambda g: make_policy("llm", cfg.play.seed, config=cfg, model_url=url),
                 max_actions=cfg.play.max_actions, records_dir=records)
    wall = time.monotonic() - t0
    after = vllm_metrics.fetch(url)
    recs = [read_record(p) for p in sorted(records.glob("*.jsonl"))]
    s = summarize(recs)
    d = vllm_metrics.delta(before, after)
    rows = [c for r in recs for c in calls(r)]
    per_stream = [c["completion_tokens"] / (c["latency_s"] - c["first_token_s"]) for c in rows
                  if c["completion_tokens"] and c["first_token_s"] is not None and c["latency_s"] > c["first_token_s"]]
    return {"ok": s["calls"] > 0 and all(x["actions"] > 0 for x in s["per_game"].values()),
            "games": {k: {kk: v[kk] for kk in ("actions", "turns", "calls")} for k, v in s["per_game"].items()},
            "wall_s": round(wall, 1), "calls": s["calls"], "errors": s["errors"],
            "error_messages": s["error_messages"], "metrics_delta": d, "metrics_after": after,
            "decode_tokens_per_s": round(d["generation_tokens"] / wall, 1) if d.get("generation_tokens") else None,
            "decode_tokens_per_s_per_stream": round(statistics.median(per_stream), 1) if per_stream else None,
            "prefix_cache_hit_rate": (round(d["prefix_cache_hits"] / d["prefix_cache_queries"], 4)
                                      if d.get("prefix_cache_queries") else None),
            "records_cache_hit_rate": round(s["cached_tokens"] / s["prompt_tokens"], 4) if s["prompt_tokens"] else None,
            "tool_call_failure_rate": s["tool_call_failure_rate"],
            "median_model_latency_s": s["model_latency_s"]["median"],
            "harness_share": s["harness_share"], "max_ready_wait_s": s["max_ready_wait_s"]}


def doctor(cfg: Any, out: Path, games: Path, only: list[str] | None, seconds: float,
           lock: Path = LOCK, python: str | None = None) -> dict[str, Any]:
    from duck.llm.client import smoke_chat
    from duck.llm.serve import VLLMServer
    out.mkdir(parents=True, exist_ok=True)
    steps: dict[str, Any] = {}
    pin = lock_pin(lock)
    step(steps, "gpu", lambda: gpu(lock))
    step(steps, "vllm_import", lambda: vllm_import(vllm_python(cfg.model.serve.executable, python, pin), pin))
    server = VLLMServer(cfg.model, port=free_port(), log_path=out / "vllm.log")
    try:
        served = step(steps, "serve", lambda: {"url": server.start().url, "boot_s": round(server.wait_ready(), 2),
                                              "chat_template": getattr(server, "chat_template_choice", None)})
        if served["ok"]:
            def smoke() -> dict[str, Any]:
                r = smoke_chat(server.url, cfg.model, timeout_s=cfg.model.serve.smoke_timeout_s)
                return {"reply": (r.content or r.reasoning)[:80], "latency_s": round(r.latency_s, 3),
                        "first_token_s": r.first_token_s, "completion_tokens": r.completion_tokens}
            step(steps, "smoke_chat", smoke)
            step(steps, "play", lambda: play(cfg, server.url, games, only, seconds, out))
    finally:
        server.stop()
    step(steps, "isolation", isolation)
    p = steps.get("play", {})
    figures = {
        "boot_s": steps["serve"].get("boot_s"),
        "decode_tokens_per_s": p.get("decode_tokens_per_s"),
        "decode_tokens_per_s_per_stream": p.get("decode_tokens_per_s_per_stream"),
        "prefix_cache_hit_rate": p.get("prefix_cache_hit_rate"),
        "tool_call_failure_rate": p.get("tool_call_failure_rate"),
        "median_model_latency_s": p.get("median_model_latency_s"),
        "kv_cache_tokens": (p.get("metrics_after") or {}).get("kv_cache_tokens"),
        "harness_share": p.get("harness_share"),
        "isolation": steps["isolation"].get("layers", "unknown"),
    }
    doc = {"ok": all(s.get("ok") for s in steps.values()) and "play" in steps, "figures": figures, "steps": steps}
    (out / "doctor.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def _main(args: argparse.Namespace) -> int:
    overrides = ["agent.fallback=null", *(args.set or [])]
    if args.executable:
        overrides.append(f"model.serve.executable={args.executable}")
    if args.model_path:
        overrides.append(f"model.serve.model_path={args.model_path}")
    if args.max_actions:
        overrides.append(f"play.max_actions={args.max_actions}")
    cfg = load_config(args.config or [], overrides)
    doc = doctor(cfg, Path(args.out), Path(args.games), args.only, args.game_seconds, Path(args.lock), args.vllm_python)
    print(json.dumps(doc, indent=1, default=str))
    print(f"duck doctor: {'OK' if doc['ok'] else 'PROBLEMS'} "
          f"({', '.join(k for k, s in doc['steps'].items() if not s.get('ok')) or 'every step held'}); "
          f"written to {Path(args.out) / 'doctor.json'}")
    return 0 if doc["ok"] else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check a GPU machine: driver, vLLM, duck serve, a smoke chat, three games")
    p.add_argument("--games", default=str(BUNDLED_GAMES), help="games folder (default: the bundled games)")
    p.add_argument("--only", nargs="*", default=None, help="game ids or prefixes (the first three are played)")
    p.add_argument("--game-seconds", type=float, default=240.0, help="how long the three games play (at once)")
    p.add_argument("--max-actions", type=int, default=None, help="per game (default: play.max_actions)")
    p.add_argument("--executable", default=None, help="the vllm executable (default: model.serve.executable)")
    p.add_argument("--model-path", default=None, help="the model folder (default: model.serve.model_path)")
    p.add_argument("--vllm-python", default=None, help="python of vLLM's venv, for the import check")
    p.add_argument("--lock", default=str(LOCK), help="vllm.lock (the driver it needs, the vLLM pin)")
    p.add_argument("--config", nargs="*", default=None, help="config files (TOML/JSON)")
    p.add_argument("--set", nargs="*", default=None, metavar="A.B=VALUE", help="config overrides")
    p.add_argument("--out", default="runs/doctor", help="folder for doctor.json, the records and vllm.log")
    p.set_defaults(func=_main)
