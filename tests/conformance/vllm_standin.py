"""A vLLM server without a GPU: the pinned vLLM's own OpenAI layer over a scripted "engine".

Run by the vLLM venv's python (scripts/vllm-venv.sh), never by ours:

    python tests/conformance/vllm_standin.py --port P --model-dir DIR [vllm serve flags ...]

Everything between the HTTP request and the engine is vLLM's own code, built the way
`vllm serve` builds it (vllm.entrypoints.openai.api_server: `build_app`, `init_app_state`):
the argument parser (`make_arg_parser`, so the flags are `duck serve`'s), the model config
from the model folder, the renderer (request validation, `parse_chat_messages`, the chat
template with the request's kwargs, the Qwen3-VL image processor), the FastAPI routes and
error handlers, `OpenAIServingChat` with the `qwen3_coder` tool parser and the `qwen3`
reasoning parser, and its streaming generator. Only the engine is a stand-in
(`ScriptedEngine`): it tokenizes the next scripted output with the model folder's
tokenizer (tests/conformance/qwen_tiny.py: Qwen's added tokens), cut at the request's
`max_tokens` (finish reason `length`) as a real engine would, and hands it to the serving
layer in the deltas vLLM's engine would produce:

* engine steps: one token a step, or with `--speculative-config` (MTP, N drafted tokens) 1 +
  the drafts accepted in a row, each with probability 0.75 (2.7 tokens a step on average
  with N = 3: FIELD §4's measured 2.6-2.9), seeded by the request;
* the output processor's `--stream-interval` (vllm/v1/engine/output_processor.py, the same
  rule in 0.19 and 0.33): a delta leaves with the first token, then once at least
  `interval` tokens are unsent, and at the end; its text is the incremental detokenizer's
  (a token that ends inside a UTF-8 character waits for the rest of it).

Two extra routes drive it: `POST /script` with `{"outputs": [text, ...]}` queues the model's
next outputs (each output is what the model writes after `<think>\\n`, tags included), and
optionally `"stream_interval"` / `"mtp_tokens"` to emulate another setting of those two flags
for the queued outputs (a measurement across intervals without restarting the server);
`GET /log` returns, per request since the last /script, the prompt vLLM rendered (decoded
from its token ids, special tokens kept), its token count, max_tokens, the output sent, the
number of deltas it went out in and the cached tokens reported.

A scripted output may also be `{"text": ..., "error_after": N}`: after N deltas the engine
hands out what it does when a request fails inside it (an output with finish reason
`error`; 0.33's serving layer sends that as an error chunk), or `{"text": ..., "drop_after":
N}`: after N deltas the connection breaks (`Dropper`). Every request reports the prefix
cache's hit as a real engine would (`num_cached_tokens`: the longest prefix shared with an
earlier prompt, in whole 16-token blocks), which 0.33 returns as
`usage.prompt_tokens_details.cached_tokens` under `--enable-prompt-tokens-details`.

Runs on vLLM 0.33 (the pin) and 0.19 (the old pin, `--shape qwen3.6`: 0.19 has no Qwen4Exp),
so that their parsers can be measured on the same outputs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import Request  # (module level: FastAPI resolves the routes' annotations here)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
BLOCK = 16  # the KV block size 0.33 resolves for the profiles' models (the prefix cache's unit)
DROP: set[str] = set()  # requests whose connection the stand-in breaks (a stream dropped mid-reply)


class Dropper:
    """ASGI wrapper: once the engine has marked a request (DROP), the next body message the
    server sends is not sent and the connection is closed: what a client sees when the server
    dies or the network breaks mid-reply (a chunked body without its end, no finish reason, no
    `[DONE]`). The requests of a test are sequential: the mark is the server's, not a request's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def guarded(message: dict) -> None:
            if message["type"] == "http.response.body" and DROP:
                DROP.clear()
                # (not an OSError: Starlette takes that for the client's disconnect and ends the body cleanly)
                raise RuntimeError("stand-in: the connection dropped mid-reply")
            await send(message)
        await self.app(scope, receive, guarded)


class ScriptedEngine:
    """The part of vLLM's EngineClient that the OpenAI layer uses, with scripted outputs."""

    def __init__(self, vllm_config: Any, tokenizer_dir: Path, stream_interval: int = 1, mtp_tokens: int = 0) -> None:
        from transformers import AutoTokenizer
        from vllm.plugins.io_processors import get_io_processor
        from vllm.renderers import renderer_from_config

        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.renderer = renderer_from_config(vllm_config)
        self.io_processor = get_io_processor(vllm_config, self.renderer, self.model_config.io_processor_plugin)
        self.input_processor = None
        self.errored = False
        self.dead_error = RuntimeError("engine dead")
        self.is_running = True
        self.tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self.outputs: list[str] = []
        self.log: list[dict[str, Any]] = []
        self.stream_interval, self.mtp_tokens = stream_interval, mtp_tokens
        self.override: dict[str, int] = {}  # /script's stream_interval / mtp_tokens
        self.seen: list[list[int]] = []  # every prompt's token ids (the prefix cache's emulation)

    # -- what the serving layer calls ---------------------------------------------------
    async def generate(self, prompt: Any, sampling_params: Any, request_id: str, **_: Any):
        from vllm.outputs import CompletionOutput, RequestOutput
        from vllm.sampling_params import RequestOutputKind

        ids = list(prompt.get("prompt_token_ids") or []) if isinstance(prompt, dict) else []
        item = self.outputs.pop(0) if self.outputs else "(the script is used up)"
        text, fault = (item, {}) if isinstance(item, str) else (item["text"], item)
        out_ids = self.tok.encode(text, add_special_tokens=False)
        cap = sampling_params.max_tokens
        finish = "length" if cap is not None and len(out_ids) > cap else "stop"
        out_ids = out_ids[:cap] if cap is not None else out_ids
        delta = sampling_params.output_kind == RequestOutputKind.DELTA
        interval = self.override.get("stream_interval", self.stream_interval)
        mtp = self.override.get("mtp_tokens", self.mtp_tokens)
        steps = (_deltas(self.tok, out_ids, interval, mtp, seed=len(self.log) * 7919 + len(ids)) if delta
                 else [(out_ids, self.tok.decode(out_ids))])
        cached = self.prefix_cache(ids)
        after = fault.get("error_after", fault.get("drop_after"))
        if after is not None:  # the fault comes after this many deltas have gone out
            steps, finish = steps[:max(1, int(after))], "error" if "error_after" in fault else None
        self.log.append({"request_id": request_id, "prompt": self.tok.decode(ids, skip_special_tokens=False),
                         "prompt_tokens": len(ids), "max_tokens": cap, "output": text,
                         "output_tokens": len(out_ids), "finish": finish, "deltas": len(steps),
                         "stream_interval": interval, "mtp_tokens": mtp, "cached_tokens": cached,
                         "fault": {k: v for k, v in fault.items() if k != "text"}})

        def output(tids: list[int], piece: str, reason: str | None) -> Any:
            return RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=ids, prompt_logprobs=None,
                                 outputs=[CompletionOutput(index=0, text=piece, token_ids=tids, cumulative_logprob=None,
                                                           logprobs=None, finish_reason=reason)],
                                 finished=reason is not None, num_cached_tokens=cached)
        for k, (tids, piece) in enumerate(steps):
            await asyncio.sleep(0)
            yield output(tids, piece, finish if k == len(steps) - 1 and after is None else None)
        if "error_after" in fault:  # what the engine hands out when a request fails inside it
            yield output([], "", "error")
        elif "drop_after" in fault:  # the next thing the server sends breaks the connection (Dropper)
            DROP.add(request_id)
            raise RuntimeError("stand-in: the connection drops here")

    def prefix_cache(self, ids: list[int]) -> int:
        """What vLLM's prefix cache would hold of `ids`: the longest prefix shared with an earlier
        prompt, in whole blocks (16 tokens, the block size 0.33 resolves for these models;
        tests/conformance/vllm_engine_config.py), never the whole prompt (its last token is
        always computed)."""
        best = 0
        for old in self.seen:
            n = next((i for i, (a, b) in enumerate(zip(old, ids)) if a != b), min(len(old), len(ids)))
            best = max(best, n)
        self.seen.append(ids)
        return min(best, max(0, len(ids) - 1)) // BLOCK * BLOCK

    def check_admission(self, n: int = 1, request_id: str | None = None) -> None:
        pass  # (0.33: an engine without admission control accepts everything)

    async def abort(self, *_: Any, **__: Any) -> None:
        pass

    async def is_tracing_enabled(self) -> bool:
        return False

    async def check_health(self) -> None:
        pass

    async def do_log_stats(self, *_: Any, **__: Any) -> None:
        pass

    async def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def __getattr__(self, name: str) -> Any:  # anything else the app touches at start-up
        raise AttributeError(f"ScriptedEngine has no {name!r}")


def _engine_steps(n: int, mtp: int, rng: Any) -> list[int]:
    """Tokens each engine step produces: 1, or with MTP 1 + the drafts accepted in a row."""
    out, left = [], n
    while left > 0:
        k = 1
        while mtp and k <= mtp and rng.random() < 0.75:
            k += 1
        out.append(min(k, left))
        left -= out[-1]
    return out


def _deltas(tok: Any, ids: list[int], interval: int, mtp: int, seed: int) -> list[tuple[list[int], str]]:
    """The deltas vLLM's output processor sends for `ids`: after each engine step, one when
    it is the first, when at least `interval` tokens are unsent, or at the end. The text is
    the incremental detokenizer's: a delta ending inside a UTF-8 character holds that part
    back; special tokens give no text."""
    import random
    out: list[tuple[list[int], str]] = []
    sent_ids, sent_text, done = 0, "", 0
    for k in _engine_steps(len(ids), mtp, random.Random(seed)):
        done += k
        last = done == len(ids)
        if not (last or sent_ids == 0 or done - sent_ids >= interval):
            continue
        text = tok.decode(ids[:done], skip_special_tokens=True)
        if text.endswith("\ufffd") and not last:
            text = text.rstrip("\ufffd")
        out.append((ids[sent_ids:done], text[len(sent_text):]))
        sent_ids, sent_text = done, text
    return out or [([], "")]


def main(argv: list[str] | None = None) -> int:
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--model-dir", default=None, help="write the tiny model folder here (default: a temp dir)")
    ours.add_argument("--model-template", default=None,
                      help="a chat template to put in the model folder (default: none there)")
    ours.add_argument("--tokenizer-corpus", default=None,
                      help="a JSON list of texts to train the tokenizer's merges on (default: none, bytes)")
    ours.add_argument("--shape", default="flash-next", choices=("flash-next", "qwen3.6"),
                      help="the model folder's architecture (qwen_tiny.py)")
    known, rest = ours.parse_known_args(argv)

    from qwen_tiny import write_model_dir
    model_dir = Path(known.model_dir or tempfile.mkdtemp(prefix="qwen-tiny-"))
    corpus = json.loads(Path(known.tokenizer_corpus).read_text()) if known.tokenizer_corpus else None
    write_model_dir(model_dir, Path(known.model_template).read_text() if known.model_template else None,
                    corpus=corpus, shape=known.shape)

    # No GPU here and a CUDA build of vLLM: take vLLM's CPU platform, as a CPU build would
    # (its device inference fails otherwise; the render path needs no device).
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    vllm.platforms._current_platform = CpuPlatform()
    try:  # 0.33
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # 0.19
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm-standin"))
    args = parser.parse_args(["--model", str(model_dir), *rest])
    validate_parsed_serve_args(args)
    asyncio.run(_serve(args, model_dir))
    return 0


async def _serve(args: argparse.Namespace, model_dir: Path) -> None:
    import uvicorn
    from vllm.config import VllmConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    try:  # 0.33
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app
    except ImportError:  # 0.19
        from vllm.entrypoints.openai.api_server import build_app, init_app_state

    engine_args = AsyncEngineArgs.from_cli_args(args)
    model_config = engine_args.create_model_config()
    model_config.quantization = None  # no kernels here
    # What EngineArgs.create_engine_config does on the way (vllm serve calls it; we build no
    # engine): the reasoning parser reaches the serving layer through this config.
    if engine_args.reasoning_parser:
        args.structured_outputs_config.reasoning_parser = engine_args.reasoning_parser
    spec = args.speculative_config
    mtp = int((spec.get("num_speculative_tokens") if isinstance(spec, dict)
               else getattr(spec, "num_speculative_tokens", 0)) or 0) if spec else 0
    engine = ScriptedEngine(VllmConfig(model_config=model_config), model_dir,
                            stream_interval=int(args.stream_interval or 1), mtp_tokens=mtp)
    app = build_app(args, ("generate",))
    await init_app_state(engine, app.state, args, supported_tasks=("generate",))

    @app.post("/script")
    async def script(request: Request) -> dict[str, Any]:
        body = await request.json()
        engine.outputs = list(body.get("outputs") or [])
        engine.log = []
        engine.override = {k: int(body[k]) for k in ("stream_interval", "mtp_tokens") if body.get(k) is not None}
        return {"queued": len(engine.outputs), "stream_interval": engine.override.get(
            "stream_interval", engine.stream_interval), "mtp_tokens": engine.override.get("mtp_tokens", engine.mtp_tokens)}

    @app.get("/log")
    async def log() -> dict[str, Any]:
        return {"requests": engine.log, "left": len(engine.outputs)}

    config = uvicorn.Config(Dropper(app), host=args.host or "127.0.0.1", port=args.port, log_level="warning")
    server = uvicorn.Server(config)
    print(json.dumps({"ready": True, "port": args.port, "model_dir": str(model_dir),
                      "started": time.time()}), flush=True)
    await server.serve()


if __name__ == "__main__":
    sys.exit(main())
