"""A local OpenAI-compatible chat server driven by a scripted model, for tests and rehearsals.

It speaks the part of vLLM's API the agent uses (`GET /v1/models`, `POST /v1/chat/completions`,
streamed or not, with `usage` and `prompt_tokens_details`, `POST /tokenize`, `GET /metrics`),
renders each prompt with the model's real chat template as vLLM applies it (duck.llm.render) to
count tokens with a stand-in tokenizer (devkit.stub.tokenizer), and emulates the prefix cache so
that what the agent sends can be measured (`stats()`: per conversation, the share of each prompt
that is a prefix of the previous one). The rule: it refuses with HTTP 400 what vLLM refuses
before generating (a history holding a tool call whose arguments are not valid JSON, a request
the template raises on, a prompt plus `max_tokens` past `max_model_len`). The scripted models:
devkit.stub.models and devkit.stub.player; a loaded GPU's latency: devkit.stub.latency; a strict
hosted provider (`--hosted`): devkit.stub.hosted. The command and its options: docs/commands.md
and docs/workbench.md, "The stub server".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from devkit.stub.handler import Handler
from devkit.stub.hosted import Hosted
from devkit.stub.latency import Engine, LatencyModel
from devkit.stub.metrics import Metrics
from devkit.stub.models import ConversationModel, FixedModel, SolutionModel, TraceModel
from devkit.stub.player import PlayerModel
from duck.llm.render import ChatTemplate, HistoryError, common_prefix, default_template, image_hashes, keyed
from devkit.stub.tokenizer import approx_tokens, image_token_list, prompt_tokens, suffix_tokens, token_ids
from devkit.stub.traces import load_trace


log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# The server

class _HTTPServer(ThreadingHTTPServer):
    # socketserver's default backlog of 5 refused connections when 24-28 games sent their
    # first requests at once (vLLM's uvicorn listens with a backlog of 2048).
    request_queue_size = 2048
    daemon_threads = True
    stub: "StubServer"  # what the handler serves (devkit.stub.handler)


class StubServer:
    """`with StubServer(model) as url:` serves on 127.0.0.1 (a free port by default)."""

    def __init__(self, model: Any, port: int = 0, host: str = "127.0.0.1",
                 model_name: str = "stub", template: ChatTemplate | str | Path | None = None,
                 max_model_len: int | None = None, keep_prompts: bool = False,
                 latency: LatencyModel | None = None, kv_tokens: int | None = None,
                 hosted: Hosted | None = None, max_images: int | None = None) -> None:
        self.model = model
        self.max_images = max_images  # vLLM's --limit-mm-per-prompt: more images in a prompt are a 400
        self.hosted = hosted  # answer as a strict hosted provider (devkit.stub.hosted)
        self.model_name = model_name
        self.template = template if isinstance(template, ChatTemplate) else (
            ChatTemplate(template) if template else default_template())
        self.max_model_len = max_model_len
        self.keep_prompts = keep_prompts  # keep every request's messages and prompt (tests)
        self.prompts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # per request: conversation, tokens, shares
        self._last: dict[str, str] = {}  # conversation → previous rendered prompt
        self._full: dict[str, str] = {}  # conversation → previous prompt + its generated reply
        self.latency = latency
        self.engine = Engine(latency) if latency else None
        self.metrics = Metrics(model_name, kv_tokens or (latency.kv_tokens if latency else None),
                               spec=(3, latency.step_tokens) if latency and latency.step_tokens > 1 else None)
        self.httpd = _HTTPServer((host, port), Handler)
        self.httpd.stub = self
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="stub-server", daemon=True)
        self.thread.start()
        return self.url

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def prompt(self, body: dict[str, Any], extra: list[dict[str, Any]] = (),
               generation: bool = True) -> tuple[str, int]:
        """The request's prompt as vLLM renders it (raises HistoryError where vLLM says 400),
        keyed with each image's hash (duck.llm.render.keyed), and its token count."""
        kwargs = body.get("chat_template_kwargs") or {}
        messages = list(body.get("messages") or []) + list(extra)
        text, _ = self.template.render(messages, body.get("tools"), kwargs.get("preserve_thinking"),
                                       kwargs.get("enable_thinking", True), generation)
        return keyed(text, image_hashes(messages)), prompt_tokens(text, image_token_list(messages))

    def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's `/tokenize`: a chat (`messages`, rendered as a request would be; vLLM's default
        adds the generation prompt) or a `prompt` text. Raises HistoryError where vLLM says 400."""
        if "messages" in body:
            text, tokens = self.prompt(body, generation=bool(body.get("add_generation_prompt", True)))
        else:
            text = str(body.get("prompt", ""))
            tokens = approx_tokens(text)
        ids = token_ids(text)
        ids = (ids + [0] * tokens)[:tokens]  # (images: their pads expand to their tokens)
        return {"count": tokens, "max_model_len": self.max_model_len or 0, "tokens": ids, "token_strs": None}

    def check(self, body: dict[str, Any]) -> tuple[str, int]:
        """What vLLM 0.19 checks before generating; the prompt and its tokens."""
        text, tokens = self.prompt(body)
        if self.max_model_len and tokens + int(body.get("max_tokens") or 0) > self.max_model_len:
            raise HistoryError(f"This model's maximum context length is {self.max_model_len} tokens. However, "
                               f"you requested {int(body.get('max_tokens') or 0)} output tokens and your prompt "
                               f"contains at least {tokens} input tokens.")
        if self.max_images is not None and len(image_token_list(body.get("messages") or [])) > self.max_images:
            raise HistoryError(f"At most {self.max_images} image(s) may be provided in one prompt.")  # (0.33's words)
        return text, tokens

    def account(self, conversation: str, body: dict[str, Any], prompt: tuple[str, int] | None = None
                ) -> tuple[int, int]:
        """Prompt tokens and cached tokens of one request; keeps the prefix statistics:
        `prefix_share`, the share of the prompt that is a prefix of the previous request's
        prompt, and `cache_share`, the share that is a prefix of the previous prompt plus
        the reply generated for it (what vLLM's prefix cache holds after that request)."""
        text, tokens = prompt or self.prompt(body)
        images = image_token_list(body.get("messages") or [])
        with self.lock:
            if self.keep_prompts:
                self.prompts.append({"conversation": conversation, "messages": body.get("messages") or [],
                                     "prompt": text})
            prev, prev_full = self._last.get(conversation), self._full.get(conversation)
            same = common_prefix(prev, text) if prev else 0
            held = common_prefix(prev_full, text) if prev_full else same
            share, cache = (same / len(text), held / len(text)) if text else (0.0, 0.0)
            cached = max(0, tokens - suffix_tokens(text, held, images)) if held else 0
            self._last[conversation] = text
            self.requests.append({"conversation": conversation, "prompt_tokens": tokens, "chars": len(text),
                                  "prefix_share": share if prev else None, "cache_share": cache if prev else None,
                                  "cached_tokens": cached})
        return tokens, cached

    def generated(self, conversation: str, body: dict[str, Any], message: dict[str, Any]) -> None:
        """Remember the prompt plus the reply as the cache would hold it."""
        try:
            full, _ = self.prompt(body, [message], generation=False)
        except HistoryError:  # a scripted reply vLLM could not take back: the cache keeps the prompt
            return
        with self.lock:
            self._full[conversation] = full

    def stats(self) -> dict[str, Any]:
        shares = [r["prefix_share"] for r in self.requests if r["prefix_share"] is not None]
        cache = [r["cache_share"] for r in self.requests if r["cache_share"] is not None]
        return {"requests": len(self.requests),
                "prefix_share_mean": sum(shares) / len(shares) if shares else None,
                "cache_share_mean": sum(cache) / len(cache) if cache else None,
                "prompt_tokens_max": max((r["prompt_tokens"] for r in self.requests), default=0)}


# ---------------------------------------------------------------------------------------
# Command line

def _main(args: argparse.Namespace) -> int:
    if args.traces:
        if not args.game:
            raise SystemExit("--traces needs --game (and --pass)")
        model: Any = TraceModel(load_trace(args.traces, args.game, args.pass_))
    elif args.solutions:
        model = SolutionModel(args.solutions)
    elif args.conversation:
        model = ConversationModel.from_files(args.conversation, strict=args.strict,
                                             timeout_stall_s=args.timeout_stall_s)
    elif args.replies:
        model = FixedModel(json.loads(Path(args.replies).read_text()), loop=args.loop)
    elif args.player:
        model = PlayerModel()
    else:
        model = FixedModel([{"content": "ok", "code": "print(valid_actions)"}], loop=True)
    try:
        latency = LatencyModel.parse(args.latency) if args.latency else None
    except (TypeError, ValueError) as e:
        raise SystemExit(f"duck stub-server: --latency: {e}") from e
    hosted = None
    if args.hosted:
        key = os.environ.get(args.api_key_env) if args.api_key_env else None
        if args.api_key_env and not key:
            raise SystemExit(f"--api-key-env {args.api_key_env}: that variable is not set")
        try:
            hosted = Hosted.parse(key, args.rate_limit, args.retry_after, args.without or [], args.refuse_field or [])
        except ValueError as e:
            raise SystemExit(str(e)) from e
    server = StubServer(model, port=args.port, host=args.host, model_name=args.model_name, latency=latency,
                        kv_tokens=args.kv_tokens, hosted=hosted)
    print(json.dumps({"url": server.url, "replies": len(model.replies), "hosted": hosted is not None,
                      "latency": latency.describe() if latency else None}), flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        log.info("stub server stats: %s", server.stats())
        if getattr(model, "mismatches", None):
            print(json.dumps({"mismatches": model.mismatches}), flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stub-server", help="a local OpenAI-compatible server driven by a scripted model")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one, printed as JSON on the first line)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--model-name", default="stub", help="the model id /v1/models lists")
    p.add_argument("--traces", default=None, help="a duck-traces folder: replay one Duck run")
    p.add_argument("--game", default=None, help="game id or 4-letter prefix (with --traces)")
    p.add_argument("--pass", dest="pass_", type=int, default=0, help="the Duck run's pass (with --traces)")
    p.add_argument("--replies", default=None, help="a JSON file with a list of fixed replies")
    p.add_argument("--loop", action="store_true", help="repeat the fixed replies forever")
    p.add_argument("--solutions", default=None,
                   help="a games folder with solution.json files: play them (one conversation per game)")
    p.add_argument("--conversation", nargs="+", default=None, metavar="FILE",
                   help="saved conversation file(s) (RUN/conversations/<game>.jsonl[.gz]): serve their replies "
                        "in order, one file per game")
    p.add_argument("--strict", action="store_true",
                   help="with --conversation: refuse (HTTP 409) a request that differs from the recorded one")
    p.add_argument("--timeout-stall-s", type=float, default=None,
                   help="with --conversation: stall this long before the end of a reply the time limit cut "
                        "(above the replaying client's model.timeout_s)")
    p.add_argument("--player", action="store_true",
                   help="a scripted model that reads the board and plays every conversation (load tests)")
    p.add_argument("--latency", default=None, metavar="SPEC",
                   help="answer as a loaded vLLM would: 'default' or settings like 'speed=10,kv_tokens=178000' "
                        "(devkit.stub.latency)")
    p.add_argument("--kv-tokens", type=int, default=None, help="KV-cache capacity /metrics reports (tokens)")
    h = p.add_argument_group("--hosted: answer as a strict hosted provider (devkit.stub.hosted)")
    h.add_argument("--hosted", action="store_true", help="standard OpenAI fields only (400 otherwise), no /tokenize, "
                   "reasoning under `reasoning`, usage with cost")
    h.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="with --hosted: accept only the key this variable holds (401 otherwise)")
    h.add_argument("--rate-limit", type=int, default=0, metavar="N",
                   help="with --hosted: every Nth chat request answers 429 with Retry-After")
    h.add_argument("--retry-after", type=float, default=1.0, metavar="S", help="the 429's Retry-After (seconds)")
    h.add_argument("--without", nargs="*", metavar="tools|images",
                   help="with --hosted: a model without tool calls (answers text) or without images (404)")
    h.add_argument("--refuse-field", nargs="*", metavar="FIELD",
                   help="with --hosted: standard fields this provider refuses too (e.g. seed)")
    p.set_defaults(func=_main)
