"""`duck doctor`: is this GPU machine ready to play, and how fast (issues 12, 35)?

In order, each step recorded with what it found and how long it took (a failed step is reported
and the doctor goes on wherever the next step can still run): `network` (the doctor moves itself
into a network namespace with no route out, as Kaggle's rerun has none: devkit.doctor.offline),
`gpu` (the driver against kaggle-dataset/vllm.lock), `vllm_import` (vLLM's own venv against the
lock's pin), `serve` (`duck serve`'s server until a smoke chat answers), `smoke_chat`, `play`
(the plan's slots of games at once through the runner, the agent and the kernel; or `--soak`:
devkit.doctor.soak), `vllm_log` (the boot's log free of downloads and kernel compiles) and
`isolation` (the sandbox's layers on this machine). Its figures (decode, prefix-cache hits, MTP's
tokens a step, tool-call failures, latency, the KV pool beside the plan's, the harness share) are
checked against the field's operating points (FIELD §4, devkit.doctor.operating); each step,
figure and limit: docs/serving.md, "Checking a GPU machine". `--sweep`: devkit.doctor.sweep.
Printed and written to `OUT/doctor.json`; exit 0 when every step held and every check passed.
Without a GPU, `--executable` takes the rehearsal's stand-in vLLM (tests/test_doctor.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from duck.config import load_config
from duck.sandbox.wall import isolation as sandbox_isolation
from duck.game.gateway import free_port
from duck.kaggle.inputs import check_driver, lock_driver_requirement
from devkit.doctor import offline, operating
from devkit.doctor.operating import LIMITS, checks, play
from devkit.doctor.soak import soak, start_rung
from duck.paths import BUNDLED_GAMES, REPO

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


def plan_step(cfg: Any) -> dict[str, Any]:
    """The serving profile's memory plan (duck.config.profiles): what it expects of this card."""
    p = cfg.plan
    return {"ok": not p.problems, "profile": p.profile, "slots": p.slots, "context_tokens": p.context_tokens,
            "kv_tokens": p.kv_tokens, "max_num_seqs": p.max_num_seqs, "mtp_tokens": p.mtp_tokens,
            "problems": p.problems}


def isolation() -> dict[str, Any]:
    """The sandbox's isolation layers (which are on here, and why any is off)."""
    return {"ok": True, "layers": sandbox_isolation.report()}


def doctor(cfg: Any, out: Path, games: Path, only: list[str] | None, seconds: float,
           lock: Path = LOCK, python: str | None = None, streams: int | None = None,
           limits: dict[str, float] | None = None, network: dict[str, Any] | None = None,
           soak_minutes: float | None = None) -> dict[str, Any]:
    """The steps in order (module docstring); `network`: offline.isolate()'s result, taken
    before anything started; `soak_minutes`: the soak (devkit.doctor.soak) instead of the play."""
    from duck.llm.client import smoke_chat
    from duck.llm.serve import SMOKE_TIMEOUT_S, VLLMServer
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").unlink(missing_ok=True)  # (this run's boot only: the log is scanned after it)
    steps: dict[str, Any] = {}
    pin = lock_pin(lock)
    streams = streams or cfg.scheduler.slots
    limits = {**LIMITS, **(limits or {})}
    if network is not None:
        steps["network"] = network | {"seconds": 0.0}
    step(steps, "gpu", lambda: gpu(lock))
    step(steps, "vllm_import", lambda: vllm_import(vllm_python(cfg.model.serve.executable, python, pin), pin))
    planned = step(steps, "plan", lambda: plan_step(cfg))  # a plan that does not fit starts nothing
    server = VLLMServer(cfg.model, port=free_port(), log_path=out / "vllm.log")
    try:
        if planned["ok"]:
            served = step(steps, "serve", lambda: {"url": server.start().url, "boot_s": round(server.wait_ready(), 2),
                                                  "chat_template": getattr(server, "chat_template_choice", None)})
        else:
            served = steps["serve"] = {"ok": False, "error": "not started: the plan does not fit", "seconds": 0.0}
        if served["ok"]:
            def smoke() -> dict[str, Any]:
                r = smoke_chat(server.url, cfg.model, timeout_s=SMOKE_TIMEOUT_S)
                return {"reply": (r.content or r.reasoning)[:80], "latency_s": round(r.latency_s, 3),
                        "first_token_s": r.first_token_s, "completion_tokens": r.completion_tokens}
            step(steps, "smoke_chat", smoke)
            if soak_minutes is None:
                step(steps, "play", lambda: play(cfg, server.url, games, only, seconds, out, n=streams))
            else:
                step(steps, "soak", lambda: soak(cfg, server.url, soak_minutes, out, streams, alive=server.alive))
    finally:
        server.stop()
    if "serve" in steps and steps["serve"].get("error") != "not started: the plan does not fit":
        step(steps, "vllm_log", lambda: offline.scan_logs([out / "vllm.log"]))
    step(steps, "isolation", isolation)
    p = steps.get("play") or steps.get("soak") or {}
    figures = operating.figures(p, steps["serve"].get("boot_s"), cfg.model.serve.mtp_tokens) | {
        "streams": p.get("streams"), "kv_cache_tokens_planned": cfg.plan.kv_tokens,
        "harness_share": p.get("harness_share"), "isolation": steps["isolation"].get("layers", "unknown")}
    verdicts = checks(figures, streams, limits)
    doc = {"ok": all(s.get("ok") for s in steps.values()) and ("play" in steps or "soak" in steps)
           and all(c["ok"] for c in verdicts.values()),
           "figures": figures, "checks": verdicts, "plan": cfg.plan.as_dict(), "steps": steps}
    if "soak" in steps:  # the first submission's rung (devkit.doctor.soak's rule)
        rung, why = start_rung(steps["soak"], cfg.model.serve.mtp_tokens, limits["min_mtp_tokens_per_step"])
        doc["start_rung"] = {"rung": rung, "why": why, "set": [f"kaggle.start_rung={rung}"],
                             "notebook": f'os.environ.setdefault("DUCK_KAGGLE__START_RUNG", "{rung}")'}
    (out / "doctor.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc


def _main(args: argparse.Namespace) -> int:
    network = offline.isolate(args.network)  # first: every server and game after it has no route out
    overrides = ["agent.fallback=null", *(args.set or [])]
    if args.executable:
        overrides.append(f"model.serve.executable={args.executable}")
    if args.model_path:
        overrides.append(f"model.serve.model_path={args.model_path}")
    if args.max_actions:
        overrides.append(f"play.max_actions={args.max_actions}")
    cfg = load_config(args.config or [], overrides)
    limits = {"min_decode_tps": args.min_decode_tps, "min_prefix_hit": args.min_prefix_hit,
              "max_boot_s": args.max_boot_s, "max_tool_failures": args.max_tool_failures,
              "min_mtp_tokens_per_step": args.min_mtp_tokens_per_step}
    if args.sweep:
        from devkit.doctor.sweep import sweep  # (its own module: the doctor's steps, once per point)
        doc = sweep(cfg, Path(args.out), Path(args.games), args.only, args.sweep_minutes, limits, network=network)
        print(json.dumps(doc, indent=1, default=str))
        print(f"duck doctor --sweep: best {doc.get('best')}, graphs {doc.get('graphs')}; "
              f"written to {Path(args.out) / 'sweep.json'}")
        return 0 if doc.get("best") and network["ok"] else 1
    doc = doctor(cfg, Path(args.out), Path(args.games), args.only, args.game_seconds, Path(args.lock),
                 args.vllm_python, streams=args.streams, limits=limits, network=network, soak_minutes=args.soak)
    print(json.dumps(doc, indent=1, default=str))
    failed = [k + (f" ({', '.join(s['failing'])})" if s.get("failing") else "")
              for k, s in doc["steps"].items() if not s.get("ok")] + \
        [f"{k} {c['value']} not {c['limit']}" for k, c in doc["checks"].items() if not c["ok"]]
    rung = doc.get("start_rung")
    print(f"duck doctor: {'OK' if doc['ok'] else 'PROBLEMS'} ({', '.join(failed) or 'every step and check held'}); "
          + (f"start on rung {rung['rung']}: {rung['why']} (notebook.py: {rung['notebook']}); " if rung else "")
          + f"written to {Path(args.out) / 'doctor.json'}")
    return 0 if doc["ok"] else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check a GPU machine: driver, vLLM, the plan, duck serve, a smoke chat, "
                       "the plan's slots of games at once, against the field's operating points")
    p.add_argument("--games", default=str(BUNDLED_GAMES), help="games folder (default: the bundled games, repeated)")
    p.add_argument("--only", nargs="*", default=None, help="game ids or prefixes to play")
    p.add_argument("--streams", type=int, default=None, help="games played at once (default: the plan's slots)")
    p.add_argument("--game-seconds", type=float, default=240.0, help="how long the games play (at once)")
    p.add_argument("--min-decode-tps", type=float, default=LIMITS["min_decode_tps"],
                   help="decode tokens/s in total at 10 streams (scaled as 169 · n^0.6 at another count)")
    p.add_argument("--min-prefix-hit", type=float, default=LIMITS["min_prefix_hit"],
                   help="the prefix-cache hit rate the play must reach (the field: 93%% of prompt tokens cached)")
    p.add_argument("--max-boot-s", type=float, default=LIMITS["max_boot_s"],
                   help="seconds from start to a ready server (Flash-Next on Kaggle: 530-615 s)")
    p.add_argument("--max-tool-failures", type=float, default=LIMITS["max_tool_failures"],
                   help="share of replies with no usable tool call (none, dropped, or empty `{}`)")
    p.add_argument("--min-mtp-tokens-per-step", type=float, default=LIMITS["min_mtp_tokens_per_step"],
                   help="MTP's accepted tokens per engine step where the server drafts (FIELD: 2.6-2.9; an untrained "
                        "draft head ~1.5)")
    p.add_argument("--soak", type=float, nargs="?", const=30.0, default=None, metavar="MINUTES",
                   help="instead of the play: the soak (devkit.doctor.soak), --streams Duck-shaped conversations for "
                        "MINUTES (default 30) with MTP and prefix caching on; says the first submission's rung")
    p.add_argument("--network", choices=("none", "host"), default="none",
                   help="none (default): the doctor, its server and games in a network namespace with no route "
                        "out, as Kaggle's rerun; host: the machine's own network")
    p.add_argument("--sweep", action="store_true", help="the first-GPU sweep: slots x context x MTP on/off "
                   "(devkit.doctor.sweep, <= 30 min), the best passing point in OUT/sweep.json")
    p.add_argument("--sweep-minutes", type=float, default=1.5, help="play per sweep point")
    p.add_argument("--max-actions", type=int, default=None, help="per game (default: play.max_actions)")
    p.add_argument("--executable", default=None, help="the vllm executable (default: model.serve.executable)")
    p.add_argument("--model-path", default=None, help="the model folder (default: model.serve.model_path)")
    p.add_argument("--vllm-python", default=None, help="python of vLLM's venv, for the import check")
    p.add_argument("--lock", default=str(LOCK), help="vllm.lock (the driver it needs, the vLLM pin)")
    p.add_argument("--config", nargs="*", default=None, help="config files (TOML/JSON)")
    p.add_argument("--set", nargs="*", default=None, metavar="A.B=VALUE", help="config overrides")
    p.add_argument("--out", default="runs/doctor", help="folder for doctor.json, the records and vllm.log")
    p.set_defaults(func=_main)
