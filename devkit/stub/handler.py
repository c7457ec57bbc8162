"""The stub server's HTTP side: the routes, a chat completion answered from the scripted
model (streamed or not, paced by the latency model when there is one), and what a hosted
provider refuses (devkit.stub.hosted). The server's state is `self.server.stub`
(devkit.stub.server.StubServer).
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator

from duck.llm.render import HistoryError
from devkit.stub.tokenizer import CHARS_PER_TOKEN, approx_tokens

log = logging.getLogger("devkit.stub.server")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: with Nagle on, the second waits for the
    # client's delayed ACK (~40 ms a small answer, e.g. each /tokenize count).
    disable_nagle_algorithm = True
    token_ids: list[int] | None = None  # the reply's tokens, sent in its last chunk (vLLM: return_token_ids)

    @property
    def stub(self) -> Any:
        return self.server.stub  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("stub: " + fmt, *args)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None, **more: Any) -> None:
        self._json(status, {"error": {"message": message, "type": more.pop("type", "stub"), "code": status, **more}},
                   headers)

    def do_GET(self) -> None:
        route, stub = self.path.rstrip("/"), self.stub
        if route in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{"id": stub.model_name, "object": "model",
                                                         "owned_by": "duck-stub"}]})
        elif route in ("/health", "/v1/health") and stub.hosted is None:
            self._json(200, {"status": "ok"})
        elif route == "/metrics" and stub.hosted is None:
            data = stub.metrics.text(stub.engine.snapshot() if stub.engine else None).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        route, stub = self.path.rstrip("/"), self.stub
        chat = route in ("/v1/chat/completions", "/chat/completions")
        if not chat and (route != "/tokenize" or stub.hosted is not None):  # (a provider has no /tokenize)
            self._error(404, f"no route {self.path}")
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except ValueError as e:
            self._error(400, f"bad JSON: {e}")
            return
        try:
            if not chat:
                self._json(200, stub.tokenize(body))
                return
            refused = stub.hosted.refuse(self.headers, body) if stub.hosted is not None else None
            if refused is not None:
                self._error(refused[0], refused[1], refused[2], type="invalid_request_error")
                return
            prompt = stub.check(body)
        except HistoryError as e:  # what vLLM 0.19 answers before any generation
            self._error(400, str(e), type="BadRequestError", param=None)
            return
        self._chat(body, prompt)

    def _chat(self, body: dict[str, Any], prompt: tuple[str, int]) -> None:
        stub = self.stub
        conversation = self.headers.get("X-Duck-Session") or "default"
        r = stub.model.reply(dict(body, _session=conversation))
        if r.get("delay_s"):
            time.sleep(r["delay_s"])
        if r.get("status"):
            self._error(r["status"], r.get("error", "scripted error"))
            return
        prompt_tokens, cached = stub.account(conversation, body, prompt)
        calls = r.get("tool_calls") or ([{"name": "python", "arguments": json.dumps({"code": r["code"]})}]
                                        if r.get("code") is not None else [])
        if stub.hosted is not None and "tools" in stub.hosted.without:
            calls = []  # a model served without tool-call support: text only
        content, reasoning = r.get("content") or "", r.get("reasoning") or ""
        completion = r.get("completion_tokens") or approx_tokens(
            content + reasoning + "".join(c["arguments"] for c in calls))
        if r.get("prompt_tokens") is not None:  # a replayed reply: the recorded server's counts
            prompt_tokens, cached = r["prompt_tokens"], r.get("cached_tokens") or 0
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                 "total_tokens": prompt_tokens + completion,
                                 "prompt_tokens_details": {"cached_tokens": cached}}
        if stub.hosted is not None and stub.hosted.cost(prompt_tokens, completion) is not None:
            usage["cost"] = stub.hosted.cost(prompt_tokens, completion)
        finish = r.get("finish_reason") or ("tool_calls" if calls else "stop")
        tool_calls = [{"index": k, "id": c.get("id") or f"call_{abs(hash((content, k, time.time_ns()))) % 10**10}",
                       "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                      for k, c in enumerate(calls)]
        message = {"role": "assistant", "content": content, "reasoning": reasoning, "tool_calls": tool_calls}
        stub.generated(conversation, body, message)
        self.token_ids = stub.sampled_ids(body, message)  # (None unless asked and the stub has a tokenizer)
        stub.metrics.prompt(prompt_tokens, cached)
        # Counted before the answer leaves: a client reading /metrics right after its reply
        # must see it (counting after the send raced with that read).
        stub.metrics.generated(completion, finish)
        with stub.metrics.lock:
            stub.metrics.in_flight += 1
        try:
            if stub.engine is None:
                self._answer(body, content, reasoning, tool_calls, finish, usage, r, None)
            else:
                with stub.engine.request(prompt_tokens, cached, completion) as stream:
                    self._answer(body, content, reasoning, tool_calls, finish, usage, r, stream)
        finally:
            with stub.metrics.lock:
                stub.metrics.in_flight -= 1

    def _reasoning(self, text: str) -> dict[str, str]:
        """The reasoning field(s) of a message or delta: vLLM's two names, a hosted provider's one."""
        return {"reasoning": text} if self.stub.hosted is not None else {"reasoning": text, "reasoning_content": text}

    def _answer(self, body, content, reasoning, tool_calls, finish, usage, r, stream) -> None:
        """`r`: the scripted reply, whose test knobs `stall_s` (mid-stream) and `stall_end_s`
        (before the end) delay the stream and `fail` breaks it after the reasoning (`_fail`);
        `stream`: the latency model's pacing, or None."""
        if body.get("stream"):
            self._stream(body, content, reasoning, tool_calls, finish, usage, stream,
                         r.get("stall_s"), r.get("stall_end_s"), r.get("fail"))
            return
        if stream is not None:
            stream.prefill()
            stream.decode(usage["completion_tokens"])
        msg = {"role": "assistant", "content": content or None, **self._reasoning(reasoning or None),
               "tool_calls": tool_calls}
        ids = {"token_ids": self.token_ids} if self.token_ids is not None else {}
        self._json(200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                         "model": self.stub.model_name, "usage": usage,
                         "choices": [{"index": 0, "message": msg, "finish_reason": finish, **ids}]})

    def _stream(self, body, content, reasoning, tool_calls, finish, usage, stream, stall_s=None,
                stall_end_s=None, fail=None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.stub.model_name}

        def send(delta: dict | None, finish_reason: str | None = None, usage_: dict | None = None,
                 **more: Any) -> None:
            chunk = dict(base, choices=[] if delta is None else
                         [{"index": 0, "delta": delta, "finish_reason": finish_reason, **more}])
            if usage_ is not None:
                chunk["usage"] = usage_
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()

        paced = self._pacer(reasoning, content, tool_calls, usage, stream)
        try:
            if stream is not None:
                stream.prefill()  # the first chunk leaves with the first token (vLLM's too)
            send({"role": "assistant", "content": ""})
            for piece in paced(reasoning, 400):
                send(self._reasoning(piece))
            if stall_s:
                time.sleep(stall_s)
            if fail:
                self._fail(fail)
                return
            for piece in paced(content, 200):
                send({"content": piece})
            for tc in tool_calls:
                send({"tool_calls": [{"index": tc["index"], "id": tc["id"], "type": "function",
                                      "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                for piece in paced(tc["function"]["arguments"], 300):
                    send({"tool_calls": [{"index": tc["index"], "function": {"arguments": piece}}]})
            if stall_end_s:  # everything sent but the end: the client's time limit cuts the reply
                time.sleep(stall_end_s)
            send({}, finish, **({"token_ids": self.token_ids} if self.token_ids is not None else {}))
            if (body.get("stream_options") or {}).get("include_usage"):
                send(None, usage_=usage)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a time-out test): nothing to do

    def _fail(self, how: str) -> None:
        """A stream that breaks mid-reply: "error", the error chunk and `[DONE]` vLLM 0.33
        sends when a request fails inside its engine (tests/conformance); "drop", the
        connection reset; "end", the body ends (no finish reason, no `[DONE]`)."""
        if how == "error":
            error = {"message": "EngineCore encountered an issue (stub)", "type": "InternalServerError",
                     "param": None, "code": 500}
            self.wfile.write(f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n".encode())
        elif how == "drop":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # (with a zero linger: a reset, not an orderly end)
        elif how != "end":
            raise ValueError(f"unknown fail {how!r} (error, drop, end)")

    def _pacer(self, reasoning: str, content: str, tool_calls: list[dict], usage: dict, stream: Any) -> Any:
        """Without a latency model: a few large pieces at once. With one: pieces of
        `tokens_per_chunk` tokens (the stream interval, or an MTP step's tokens), each sent
        when the model says it would be generated."""
        chars = sum(len(x) for x in (reasoning, content, *(tc["function"]["arguments"] for tc in tool_calls)))
        per_char = usage["completion_tokens"] / max(1, chars)
        small = max(1, round(self.stub.latency.tokens_per_chunk * CHARS_PER_TOKEN)) if stream is not None else 0

        def paced(text: str, size: int) -> Iterator[str]:
            for piece in _pieces(text, small or size):
                if stream is not None:
                    stream.decode(len(piece) * per_char)
                yield piece
        return paced


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]
