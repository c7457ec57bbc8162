"""A local OpenAI-compatible chat server driven by a scripted model, for tests and rehearsals.

It speaks the part of vLLM's API the agent uses (`GET /v1/models`, `POST
/v1/chat/completions`, streamed or not, with `usage` and `prompt_tokens_details`, and `POST
/tokenize` with `messages` or `prompt`, answering vLLM's `{"count", "max_model_len", "tokens"}`),
renders each prompt with the model's real chat template as vLLM applies it (duck.testing.stub.render:
../shared/qwen3.8/chat_template.jinja by default, read at run time) to count tokens with a
stand-in tokenizer (duck.testing.stub.tokenizer), and emulates the
prefix cache so that what the agent sends can be measured: `stats()` gives, per
conversation, the share of each prompt that is a prefix of the previous one. It refuses
what vLLM 0.19 refuses with HTTP 400 before generating: a history holding a tool call whose
arguments are not valid JSON, a request the template raises on, and (with `max_model_len`)
a prompt plus `max_tokens` longer than the context.

The scripted models are in duck.testing.stub.models (`FixedModel`, `TraceModel`,
`SolutionModel`), the prompt rendering in duck.testing.stub.render, the Duck traces'
reading in duck.testing.stub.traces.

With a `LatencyModel` (duck.testing.stub.latency) it answers as slowly as a loaded vLLM
would: time to first token and decode time follow the number of concurrent streams and the
prompt (uncached) and generated tokens; without one it answers at once. `GET /metrics` gives
Prometheus text with vLLM 0.19's metric names (duck.testing.stub.metrics: prefix-cache
queries and hits, tokens, KV-cache capacity).

`duck stub-server --port P --replies FILE` serves fixed replies (a JSON list of
`{"content", "reasoning", "code"}` or `tool_calls`); `--traces DIR --game G --pass N` replays a
Duck run; `--solutions DIR` plays the bundled games' solutions; `--conversation FILE...`
replays saved conversations (duck.play.conversation; `--strict` refuses a request that
differs from the recorded one); `--player` a scripted model that reads the board and plays
(duck.testing.stub.player); `--latency default` (or `speed=20,kv_tokens=178000`:
duck.testing.stub.latency: the field's Flash-Next figures and the default profile's KV pool)
adds the latency model.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

from duck.testing.stub.latency import Engine, LatencyModel
from duck.testing.stub.metrics import Metrics
from duck.testing.stub.models import ConversationModel, FixedModel, SolutionModel, TraceModel
from duck.testing.stub.player import PlayerModel
from duck.testing.stub.render import (CHARS_PER_TOKEN, ChatTemplate, HistoryError, approx_tokens, common_prefix,
                                      default_template, image_hashes, image_token_list, keyed, prompt_tokens,
                                      suffix_tokens)
from duck.testing.stub.tokenizer import token_ids
from duck.testing.stub.traces import load_trace


log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# The server

class _HTTPServer(ThreadingHTTPServer):
    # socketserver's default backlog of 5 refused connections when 24-28 games sent their
    # first requests at once (vLLM's uvicorn listens with a backlog of 2048).
    request_queue_size = 2048
    daemon_threads = True


class StubServer:
    """`with StubServer(model) as url:` serves on 127.0.0.1 (a free port by default)."""

    def __init__(self, model: Any, port: int = 0, host: str = "127.0.0.1",
                 model_name: str = "stub", template: ChatTemplate | str | Path | None = None,
                 max_model_len: int | None = None, keep_prompts: bool = False,
                 latency: LatencyModel | None = None, kv_tokens: int | None = None) -> None:
        self.model = model
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
        self.httpd = _HTTPServer((host, port), _handler(self))
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
        keyed with each image's hash (duck.testing.stub.render.keyed), and its token count."""
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


def _handler(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in two writes: with Nagle on, the second waits for the
        # client's delayed ACK (~40 ms a small answer, e.g. each /tokenize count).
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("stub: " + fmt, *args)

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._json(200, {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                                             "owned_by": "duck-stub"}]})
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._json(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/metrics":
                data = server.metrics.text(server.engine.snapshot() if server.engine else None).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            route = self.path.rstrip("/")
            if route not in ("/v1/chat/completions", "/chat/completions", "/tokenize"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            except ValueError as e:
                self._json(400, {"error": {"message": f"bad JSON: {e}"}})
                return
            if route == "/tokenize":
                try:
                    self._json(200, server.tokenize(body))
                except HistoryError as e:
                    self._json(400, {"error": {"message": str(e), "type": "BadRequestError", "code": 400}})
                return
            try:
                prompt = server.check(body)
            except HistoryError as e:  # what vLLM 0.19 answers before any generation
                self._json(400, {"error": {"message": str(e), "type": "BadRequestError", "param": None,
                                           "code": 400}})
                return
            r = server.model.reply(dict(body, _session=self.headers.get("X-Duck-Session") or "default"))
            if r.get("delay_s"):
                time.sleep(r["delay_s"])
            if r.get("status"):
                self._json(r["status"], {"error": {"message": r.get("error", "scripted error"),
                                                   "type": "stub", "code": r["status"]}})
                return
            conversation = self.headers.get("X-Duck-Session") or "default"
            prompt_tokens, cached = server.account(conversation, body, prompt)
            calls = r.get("tool_calls") or ([{"name": "python", "arguments": json.dumps({"code": r["code"]})}]
                                            if r.get("code") is not None else [])
            content, reasoning = r.get("content") or "", r.get("reasoning") or ""
            completion = r.get("completion_tokens") or approx_tokens(
                content + reasoning + "".join(c["arguments"] for c in calls))
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                     "total_tokens": prompt_tokens + completion,
                     "prompt_tokens_details": {"cached_tokens": cached}}
            finish = r.get("finish_reason") or ("tool_calls" if calls else "stop")
            if r.get("prompt_tokens") is not None:  # a replayed reply: the recorded server's counts
                prompt_tokens, cached = r["prompt_tokens"], r.get("cached_tokens") or 0
                usage.update(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens + completion,
                             prompt_tokens_details={"cached_tokens": cached})
            tool_calls = [{"index": k, "id": c.get("id") or f"call_{abs(hash((content, k, time.time_ns()))) % 10**10}",
                           "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                          for k, c in enumerate(calls)]
            server.generated(conversation, body, {"role": "assistant", "content": content, "reasoning": reasoning,
                                                  "tool_calls": tool_calls})
            server.metrics.prompt(prompt_tokens, cached)
            # Counted before the answer leaves: a client reading /metrics right after its reply
            # must see it (counting after the send raced with that read).
            server.metrics.generated(completion, finish)
            with server.metrics.lock:
                server.metrics.in_flight += 1
            try:
                if server.engine is None:
                    self._answer(body, content, reasoning, tool_calls, finish, usage, r, None)
                else:
                    with server.engine.request(prompt_tokens, cached, completion) as stream:
                        self._answer(body, content, reasoning, tool_calls, finish, usage, r, stream)
            finally:
                with server.metrics.lock:
                    server.metrics.in_flight -= 1

        def _answer(self, body, content, reasoning, tool_calls, finish, usage, r, stream) -> None:
            """`r`: the scripted reply, whose test knobs `stall_s` (mid-stream) and `stall_end_s`
            (before the end) delay the stream; `stream`: the latency model's pacing, or None."""
            if body.get("stream"):
                self._stream(body, content, reasoning, tool_calls, finish, usage, stream,
                             r.get("stall_s"), r.get("stall_end_s"))
                return
            if stream is not None:
                stream.prefill()
                stream.decode(usage["completion_tokens"])
            msg = {"role": "assistant", "content": content or None, "reasoning": reasoning or None,
                   "reasoning_content": reasoning or None, "tool_calls": tool_calls}
            self._json(200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                             "model": server.model_name, "usage": usage,
                             "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})

        def _stream(self, body, content, reasoning, tool_calls, finish, usage, stream, stall_s=None,
                    stall_end_s=None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": server.model_name}

            def send(delta: dict | None, finish_reason: str | None = None, usage_: dict | None = None) -> None:
                chunk = dict(base, choices=[] if delta is None else
                             [{"index": 0, "delta": delta, "finish_reason": finish_reason}])
                if usage_ is not None:
                    chunk["usage"] = usage_
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            # Without a latency model: a few large pieces at once. With one: pieces of
            # `tokens_per_chunk` tokens (the stream interval, or an MTP step's tokens), each
            # sent when the model says it would be generated.
            chars = sum(len(x) for x in (reasoning, content, *(tc["function"]["arguments"] for tc in tool_calls)))
            per_char = usage["completion_tokens"] / max(1, chars)
            small = max(1, round(server.latency.tokens_per_chunk * CHARS_PER_TOKEN)) if stream is not None else 0

            def paced(text: str, size: int) -> Iterator[str]:
                for piece in _pieces(text, small or size):
                    if stream is not None:
                        stream.decode(len(piece) * per_char)
                    yield piece

            try:
                if stream is not None:
                    stream.prefill()  # the first chunk leaves with the first token (vLLM's too)
                send({"role": "assistant", "content": ""})
                for piece in paced(reasoning, 400):
                    send({"reasoning": piece, "reasoning_content": piece})
                if stall_s:
                    time.sleep(stall_s)
                for piece in paced(content, 200):
                    send({"content": piece})
                for tc in tool_calls:
                    send({"tool_calls": [{"index": tc["index"], "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                    for piece in paced(tc["function"]["arguments"], 300):
                        send({"tool_calls": [{"index": tc["index"], "function": {"arguments": piece}}]})
                if stall_end_s:  # everything sent but the end: the client's time limit cuts the reply
                    time.sleep(stall_end_s)
                send({}, finish)
                if (body.get("stream_options") or {}).get("include_usage"):
                    send(None, usage_=usage)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a time-out test): nothing to do

    return Handler


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


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
    server = StubServer(model, port=args.port, host=args.host, model_name=args.model_name, latency=latency,
                        kv_tokens=args.kv_tokens)
    print(json.dumps({"url": server.url, "replies": len(model.replies),
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
                        "(duck.testing.stub.latency)")
    p.add_argument("--kv-tokens", type=int, default=None, help="KV-cache capacity /metrics reports (tokens)")
    p.set_defaults(func=_main)
