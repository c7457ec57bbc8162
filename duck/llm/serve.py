"""`duck serve`: the vLLM server for the serving profile (duck.config.profiles), as a supervised child.

`command(serve, name)` builds the `vllm serve` command line of the profile the config was
resolved with (`model.profile`; DESIGN §1c, FIELD §4): the tool-call and reasoning parsers,
prefix caching (the agent's prompts are prefix-stable), the memory plan's limits, MTP only where
the checkpoint holds its drafter (duck.llm.drafter), the settings the field found stable on the
RTX Pro 6000, the rung of the restart ladder (`--rung N`), and `--chat-template` only when the
model folder's template lacks the `preserve_thinking` branch (`pick_chat_template`). The image
processor's cap (`MAX_PIXELS`: boards are at most 640 x 640) keeps vLLM from profiling a
4096 x 4096 dummy image at start-up. Every flag and why: docs/serving.md, "The flags". The rule:
the pinned vLLM's own parser reads every flag here for every profile (tests/conformance), and a
plan that does not fit the card is an error (exit 2) before anything starts, `--dry-run` too.

`VLLMServer` starts it in its own process group with its output in a log file, is ready when
`/v1/models` lists the model and a smoke chat succeeds, notices a crash (the log's tail in the
error) and stops cleanly (SIGTERM to the group, then SIGKILL). Several GPUs: one server per GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from duck.config import ModelConfig, ServeConfig, at_rung, load_config
from duck.llm.drafter import served, served_config
from duck.config.profiles import ProfileError, get as profile_of

from duck.paths import SHARED

log = logging.getLogger(__name__)

MAX_PIXELS = 640 * 640  # `--mm-processor-kwargs`: a 64x64 board at 10x (the module docstring says why)
SMOKE_TIMEOUT_S = 120.0  # the first chat after start-up (CUDA graphs may still compile)


class ServeError(RuntimeError):
    """The server did not start, did not become ready, or died."""


def model_chat_template(model_path: str | Path) -> str | None:
    """The chat template a model folder carries (what vLLM would use without
    `--chat-template`): chat_template.jinja, chat_template.json, or tokenizer_config.json's."""
    d = Path(model_path)
    try:
        if (d / "chat_template.jinja").is_file():
            return (d / "chat_template.jinja").read_text()
        for name in ("chat_template.json", "tokenizer_config.json"):
            if (d / name).is_file():
                t = json.loads((d / name).read_text()).get("chat_template")
                if isinstance(t, list):  # named templates: the default one
                    t = next((x.get("template") for x in t if x.get("name") == "default"), None)
                if isinstance(t, str):
                    return t
    except (OSError, ValueError) as e:
        log.warning("could not read the chat template of %s: %s", d, e)
    return None


def pick_chat_template(serve: ServeConfig) -> tuple[str | None, str]:
    """The `--chat-template` to pass (None: the model's own) and a sentence saying why."""
    if serve.chat_template:
        return serve.chat_template, f"chat template {serve.chat_template} (set in the config)"
    own = model_chat_template(serve.model_path)
    if own is not None and "preserve_thinking" in own:
        return None, "the model folder's chat template (it has the preserve_thinking branch)"
    # (in a checkout the team's copy beside it; on Kaggle the dataset's copy is configured instead)
    fallback = Path(serve.fallback_chat_template or SHARED / serve.chat_template_family / "chat_template.jinja")
    what = "has no chat template" if own is None else "has a chat template without preserve_thinking"
    if fallback.is_file():
        return str(fallback), f"chat template {fallback}: the model folder {what}"
    return None, (f"the model folder's chat template, although it {what.split(' ', 1)[1]}, and no copy at "
                  f"{fallback}: past thinking is dropped at each new turn (prefix-cache misses)")


def command(serve: ServeConfig, model_name: str, port: int | None = None,
            chat_template: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The vLLM command line and the environment it needs (`chat_template`: pick_chat_template's)."""
    argv = [serve.executable, "serve", serve.model_path,
            "--served-model-name", model_name,
            "--host", serve.host, "--port", str(port or serve.port),
            "--max-model-len", str(serve.max_model_len),
            "--gpu-memory-utilization", str(serve.gpu_memory_utilization),
            "--max-num-seqs", str(serve.max_num_seqs),
            "--max-num-batched-tokens", str(serve.max_num_batched_tokens),
            "--stream-interval", str(serve.stream_interval),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
            "--reasoning-parser", "qwen3",
            "--limit-mm-per-prompt", json.dumps({"image": serve.images_per_prompt, "video": 0}),
            "--mm-processor-kwargs", json.dumps({"max_pixels": MAX_PIXELS}),
            "--default-chat-template-kwargs", json.dumps({"preserve_thinking": True})]
    if serve.enforce_eager:
        argv.append("--enforce-eager")
    elif serve.cudagraph_mode:
        argv += ["--compilation-config", json.dumps({"cudagraph_mode": serve.cudagraph_mode})]
    if serve.linear_backend:
        argv += ["--linear-backend", serve.linear_backend]
    if serve.attention_backend:
        argv += ["--attention-backend", serve.attention_backend]
    if serve.kv_cache_dtype and serve.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", serve.kv_cache_dtype]
    if serve.mtp_tokens:
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": serve.mtp_tokens})]
    if serve.engram_offload:
        argv += ["--engram-config", json.dumps({"cpu_offload": True})]
    if serve.prefix_match_unit:
        argv += ["--prefix-match-unit", str(serve.prefix_match_unit)]
    if chat_template:
        argv += ["--chat-template", chat_template]
    argv += list(serve.extra_args)
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}  # its top-k kernel livelocked (vLLM #43885)
    return argv, env


def plan_lines(plan: Any) -> list[str]:
    """The memory plan, as `duck serve --dry-run` prints it (one `# ` line each)."""
    h = plan.host
    return [f"# profile {plan.profile}: {plan.served_name} ({plan.checkpoint}; {plan.architecture or '?'}; "
            f"architecture from {plan.arch_from})",
            f"# GPU {plan.gpu_gib} GiB x {plan.utilization} = {plan.usable_gib} GiB: weights {plan.weights_gib} + "
            f"overhead {plan.overhead_gib} + state {plan.state_gib} ({plan.state_mib_per_slot} MiB a request, "
            f"x{1 + plan.prefix_checkpoints} with its prefix checkpoint) + KV {plan.kv_pool_gib} GiB",
            f"# KV {plan.kv_cache_dtype}: {plan.kv_bytes_per_token} B a token, {plan.kv_tokens} tokens; "
            f"window {plan.window}, context {plan.context_tokens} a game (output {plan.output_tokens}), "
            f"{plan.mean_tokens_per_slot} on average",
            f"# slots {plan.slots} (fit {plan.slots_fit}), --max-num-seqs {plan.max_num_seqs}, MTP {plan.mtp_tokens}",
            f"# host {h.get('total_gb')} GB: n-gram table {h.get('ngram_table_gb')}, vLLM {h.get('vllm_gb')}, "
            f"games {h.get('games_gb')}, tmpfs {h.get('tmpfs_gb')} ({plan.kernel_disk_mb} MB x {h.get('kernels')} "
            f"kernels), spare {h.get('spare_gb')}",
            *(f"# PROBLEM: {x}" for x in plan.problems)]


class VLLMServer:
    """One supervised `vllm serve` process."""

    def __init__(self, model: ModelConfig, *, port: int | None = None, gpu: str | None = None,
                 log_path: str | Path | None = None) -> None:
        self.model = model
        self.serve = model.serve
        self.port = port or self.serve.port
        self.gpu = gpu
        self.log_path = Path(log_path or self.serve.log_path)
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.serve.host in ("0.0.0.0", "") else self.serve.host
        return f"http://{host}:{self.port}"

    def start(self) -> "VLLMServer":
        self.serve, self.mtp_check = served(self.serve)  # MTP only with its drafter's tensors
        self.chat_template, why = pick_chat_template(self.serve)
        (log.info if self.chat_template or "preserve_thinking branch" in why else log.warning)("serving with %s", why)
        self.chat_template_choice = why
        argv, extra_env = command(self.serve, self.model.name, self.port, self.chat_template)
        env = dict(os.environ, **extra_env)
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")
        logf.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        logf.flush()
        log.info("starting: %s", " ".join(argv))
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        logf.close()  # the child keeps its own handle
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise ServeError when the process has died."""
        if self.proc is None:
            raise ServeError("the server was never started")
        code = self.proc.poll()
        if code is not None:
            raise ServeError(f"vLLM exited with code {code}; last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_ready(self, timeout: float | None = None, poll_s: float = 1.0) -> float:
        """Block until `/v1/models` lists the model and a smoke chat succeeds; returns the
        seconds since start. Raises ServeError on a crash or on time-out."""
        from duck.llm.client import list_models  # (openai is slow to import: only when needed)
        deadline = time.monotonic() + (timeout or self.serve.ready_timeout_s)
        while True:
            self.check()
            try:
                if self.model.name in list_models(self.url, timeout=5.0):
                    break
            except Exception as e:  # not listening yet, or still loading
                log.debug("not ready yet: %s", e)
            if time.monotonic() > deadline:
                raise ServeError(f"vLLM not ready after {timeout or self.serve.ready_timeout_s:.0f} s; "
                                 f"last log lines:\n{self.log_tail()}")
            time.sleep(poll_s)
        self.smoke()
        self.ready_s = time.monotonic() - self.t0
        return self.ready_s

    def smoke(self) -> str:
        """One short chat with thinking off; raises ServeError when it fails."""
        from duck.llm.client import ModelError, smoke_chat  # (openai is slow to import; `duck serve --help` needs none)
        try:
            reply = smoke_chat(self.url, self.model, timeout_s=SMOKE_TIMEOUT_S)
        except ModelError as e:
            self.check()
            raise ServeError(f"smoke chat failed: {e}") from e
        if not (reply.content or reply.reasoning or reply.tool_calls):
            raise ServeError("smoke chat returned an empty reply")
        return reply.content

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM to the process group, then SIGKILL after `grace_s`; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                return self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                log.warning("vLLM did not stop on %s", sig.name)
        return self.proc.poll()

    def __enter__(self) -> "VLLMServer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_servers(model: ModelConfig, gpus: list[str] | None, log_dir: str | Path | None = None) -> list[VLLMServer]:
    """One server per GPU (or one server when `gpus` is empty), all ready or an error."""
    gpus = gpus or [None]  # type: ignore[list-item]
    servers = []
    for i, gpu in enumerate(gpus):
        log_path = Path(log_dir, f"vllm_{i}.log") if log_dir else (
            model.serve.log_path if len(gpus) == 1 else Path(model.serve.log_path).with_suffix(f".{i}.log"))
        servers.append(VLLMServer(model, port=model.serve.port + i, gpu=gpu, log_path=log_path).start())
    try:
        for s in servers:
            s.wait_ready()
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


def _main(args: argparse.Namespace) -> int:
    path = [f"model.serve.model_path={args.model_path}"] if args.model_path else []
    cfg = at_rung(load_config(args.config or [], (args.set or []) + path), args.rung)
    if cfg.plan.profile == "hosted":
        print("duck serve: the hosted profile is served by its provider: nothing to start here "
              "(duck play --model-url URL --set model.profile=hosted)", file=sys.stderr)
        return 2
    if args.executable:
        cfg.model.serve.executable = args.executable
    if args.port:
        cfg.model.serve.port = args.port
    cfg, mtp = served_config(cfg)  # (a warning when the checkpoint lacks the MTP drafter)
    gpus = [g for g in (args.gpus or "").split(",") if g]
    if args.dry_run:
        template, why = pick_chat_template(cfg.model.serve)
        print(f"# {why}", file=sys.stderr)
        print(f"# rung {args.rung}: {profile_of(cfg.model.profile).ladder[args.rung].name}")
        for line in plan_lines(cfg.plan) + ([f"# {mtp.line}"] if mtp.line else []):
            print(line)
        if args.json:
            print(json.dumps({"plan": cfg.plan.as_dict() | {"mtp_check": mtp.line}}))
        for i in range(max(1, len(gpus))):
            argv, env = command(cfg.model.serve, cfg.model.name, cfg.model.serve.port + i, template)
            print(" ".join(f"{k}={v}" for k, v in env.items()), " ".join(_quote(a) for a in argv))
    try:
        cfg.plan.check()
    except ProfileError as e:
        print(f"duck serve: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    stopping: dict[str, Any] = {"sig": None, "up": False}

    def on_signal(sig: int, _frame: Any) -> None:
        first = stopping["sig"] is None
        stopping["sig"] = sig
        if first and not stopping["up"]:
            # Still starting (vLLM loads for minutes): stop now, not once it is ready;
            # start_servers stops the servers it started (each in its own session, which
            # a signal to our process group would not reach).
            raise _Stopped(sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        servers = start_servers(cfg.model, gpus, args.log_dir)
    except ServeError as e:
        print(json.dumps({"ready": False, "error": str(e)}), flush=True)
        return 1
    except _Stopped as e:
        print(json.dumps({"ready": False, "error": f"stopped by signal {e.args[0]} while starting"}), flush=True)
        return 128 + e.args[0]
    stopping["up"] = True
    print(json.dumps({"ready": True, "urls": [s.url for s in servers],
                      "ready_s": [round(s.ready_s or 0, 1) for s in servers]}), flush=True)
    code = 0
    try:
        while stopping["sig"] is None:
            dead = [s for s in servers if not s.alive()]
            if dead:
                print(json.dumps({"crashed": [s.url for s in dead],
                                  "log_tail": dead[0].log_tail(10)}), flush=True, file=sys.stderr)
                code = 2
                break
            time.sleep(1.0)
    finally:
        for s in servers:
            s.stop()
    return code


class _Stopped(BaseException):
    """SIGTERM or SIGINT while the servers were starting."""


def _quote(a: str) -> str:
    return f"'{a}'" if any(c in a for c in " {}\"") else a


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start vLLM (one server per GPU), wait until ready, supervise it")
    p.add_argument("--config", nargs="*", default=None, help="config files (TOML/JSON)")
    p.add_argument("--set", nargs="*", default=None, help="overrides like model.serve.max_num_seqs=24")
    p.add_argument("--model-path", default=None, help="the model folder (default: model.serve.model_path)")
    p.add_argument("--port", type=int, default=None, help="first server's port (default: model.serve.port)")
    p.add_argument("--gpus", default=None, help="comma-separated GPU ids: one server each, ports counting up")
    p.add_argument("--executable", default=None, help="the vllm executable (a stand-in in tests)")
    p.add_argument("--rung", type=int, default=0, help="the rung of the profile's restart ladder (0: as planned; "
                   "1: MTP off; 2: and piecewise CUDA graphs; 3: MTP off, eager)")
    p.add_argument("--log-dir", default=None, help="folder for the servers' logs, vllm_N.log (default: model.serve.log_path)")
    p.add_argument("--dry-run", action="store_true", help="print the memory plan and the command, and exit "
                   "(2 when the plan does not fit the card)")
    p.add_argument("--json", action="store_true", help="with --dry-run: the plan as one JSON line too")
    p.set_defaults(func=_main)
