"""The model client: one OpenAI-compatible chat endpoint (vLLM) or several, one per GPU.

`ModelClient.chat(messages, tools, seed=...)` streams one chat completion and returns a
`Reply` (visible text, reasoning, tool calls, finish reason, the server's token usage and
timings). What it guarantees, because the Duck lost turns and time to each of these:

* Qwen sampling (temperature, top_p, top_k) with thinking on or off through
  `chat_template_kwargs`, an output-token cap, and a seed per request (`request_seed`:
  derived from game, pass, turn and call, so two runs of one config sample alike).
* Streaming with a wall-clock limit per request: when the limit passes mid-reply, what
  was received so far is returned (`Reply.cut == "timeout"`), not thrown away.
* Retries with exponential back-off on connection errors, time-outs with nothing received,
  429 and 5xx, moving to the next base URL on each retry; other 4xx fail at once
  (`ModelError`, or `ContextOverflow` when the prompt is too long for the server).
* Reasoning returned to the server in the field its chat template reads. vLLM returns the
  reasoning parser's output as `reasoning` (older versions: `reasoning_content`) and, for
  incoming assistant messages, copies `reasoning` onto `reasoning_content`, the variable
  the Qwen3/3.6/3.8 chat templates render inside `<think>`. `Reply.message()` sends both
  names, so old and new servers render it alike. Past reasoning is kept (dropping it halved
  the field's scores, ../shared/FIELD.md §3) except in a reply cut by the output cap or the
  time limit: that one keeps only the tail of its thinking (`model.cut_thinking_chars`),
  behind a marker saying so (`Reply.message(marker=...)`), since a cut reply's whole
  thinking is what took a scripted prompt from 2K to 24.7K tokens in two cuts.
* Token counts as the server makes them: `ModelClient.tokenize(messages)` asks vLLM's
  `/tokenize` (the chat template and the tokenizer of the served model, images expanded);
  `ModelClient.counter(tools)` wraps it in a per-message cache with calibrated estimates as
  the fallback (duck.llm.tokens).
* No tool call whose arguments are not a complete JSON object ever leaves the client:
  vLLM 0.19 `json.loads` every past call of the history and answers HTTP 400 to the whole
  request when one fails, so one broken call would end the model's game. Such a call (the
  reply was cut inside it, or the code held a tag of the qwen3_coder format such as
  `</parameter>` and the parser cut it there) is dropped from `Reply.tool_calls` and named
  in `Reply.dropped` with why (`length`, `timeout` or `invalid`), so the agent can tell the
  model what happened. vLLM 0.19 reports `finish_reason: "tool_calls"` even when the output
  cap cut the call, so a reply is also `cut="length"` when it used the whole cap.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import urllib.request

import openai
from openai import OpenAI

from duck.config import ModelConfig
from duck.llm.tokens import TokenCounter
from duck.seeds import stable_hash

log = logging.getLogger(__name__)


class ModelError(RuntimeError):
    """The model server could not give a reply (after retries, or a request it refuses)."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ContextOverflow(ModelError):
    """The server refused the prompt as longer than its context window."""


def request_seed(*parts: Any) -> int:
    """A 31-bit seed from (run seed, game, pass, turn, call), stable across processes."""
    return stable_hash(*parts) & 0x7FFFFFFF


def pick_url(urls: list[str], game_id: str, index: int | None = None) -> int:
    """Which base URL a game starts on: `index` when the runner assigns one (round robin
    over games), else a stable hash of the game id."""
    if not urls:
        raise ModelError("no model URL configured")
    return (index if index is not None else stable_hash(game_id)) % len(urls)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the server produced


@dataclass
class Reply:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    latency_s: float = 0.0
    first_token_s: float | None = None
    url: str = ""
    attempts: int = 1
    seed: int | None = None
    cut: str | None = None  # "timeout" (the wall-clock limit) or "length" (the token cap)
    # Calls the client did not keep (arguments not a complete JSON object), and why:
    # "length" (cut at the output cap), "timeout" (cut at the time limit), "invalid"
    # (complete reply, unreadable arguments: code holding a tag of the tool-call format).
    dropped: list[dict[str, str]] = field(default_factory=list)
    # A cut reply keeps this many characters of its thinking's tail in the history (0: all).
    keep_thinking: int = 0

    def thinking(self) -> tuple[str, int]:
        """The reasoning the history keeps, and how many characters of it were dropped: all
        of it, unless the reply was cut and thought longer than `keep_thinking` characters;
        then its tail, from the first line (or word) start inside that tail."""
        r, keep = self.reasoning, self.keep_thinking
        if not self.cut or not keep or len(r) <= keep:
            return r, 0
        tail = r[-keep:]
        for sep in ("\n", " "):
            i = tail.find(sep)
            if 0 <= i < keep // 4:
                tail = tail[i + 1:]
                break
        return tail, len(r) - len(tail)

    @property
    def thinking_dropped(self) -> int:
        """Characters of thinking the history leaves out (0 unless the reply was cut)."""
        return self.thinking()[1]

    def message(self, marker: str = "…") -> dict[str, Any]:
        """The assistant message to append to the history, as generated, except that a cut
        reply keeps only the tail of its thinking, after `marker` (the agent passes a
        sentence saying so: prompts/thinking_cut.j2)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        reasoning, dropped = self.thinking()
        if dropped:
            reasoning = f"{marker}\n{reasoning}"
        if reasoning:
            msg["reasoning"] = reasoning  # what vLLM reads (and copies for the template)
            msg["reasoning_content"] = reasoning  # what the template reads (older servers)
        calls = [c for c in self.tool_calls if json_object(c.arguments) or c.arguments == ""]  # (never one vLLM refuses)
        if calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
        return msg

    def stats(self) -> dict[str, Any]:
        """Per-call numbers for the record (`model` events) and the report."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "latency_s": round(self.latency_s, 3),
                "first_token_s": None if self.first_token_s is None else round(self.first_token_s, 3),
                "finish_reason": self.finish_reason, "cut": self.cut, "url": self.url,
                "attempts": self.attempts, "reasoning_chars": len(self.reasoning),
                "content_chars": len(self.content), "tool_calls": len(self.tool_calls),
                "dropped_calls": [d["why"] for d in self.dropped], "thinking_dropped": self.thinking_dropped,
                # Kept calls with nothing to run (`{}` or ""): what a streaming parser that
                # lost the arguments leaves (vllm#31501); duck doctor counts them as failures.
                "empty_calls": sum(1 for c in self.tool_calls if empty_call(c.arguments))}


class ModelClient:
    """Chat completions against one or several OpenAI-compatible base URLs, with the sampling,
    time-outs and retries of a ModelConfig (the one place their defaults live)."""

    def __init__(self, urls: list[str] | str, config: ModelConfig, *, start: int = 0,
                 api_key: str = "EMPTY", session: str | None = None) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ModelError("no model URL configured")
        self.cfg = config
        self.timeout_s = config.timeout_s
        self.retries = config.retries
        self.backoff_s = config.backoff_s
        self.current = start % len(self.urls)
        # One client per URL; the openai client's own retries are off (ours move across URLs).
        timeout = openai.Timeout(connect=10.0, read=config.stall_s, write=30.0, pool=10.0)
        headers = {"X-Duck-Session": session} if session else None  # ignored by vLLM
        self._clients = [OpenAI(base_url=_v1(u), api_key=api_key, timeout=timeout, max_retries=0,
                                default_headers=headers) for u in self.urls]
        self._rng = random.Random(start)

    def body(self) -> dict[str, Any]:
        """The non-OpenAI fields vLLM reads from the request body."""
        kwargs: dict[str, Any] = {"enable_thinking": self.cfg.thinking}
        if self.cfg.preserve_thinking is not None:
            kwargs["preserve_thinking"] = self.cfg.preserve_thinking
        if self.cfg.reasoning_effort is not None:  # (Qwen3.8's template: xhigh, medium or low)
            kwargs["reasoning_effort"] = self.cfg.reasoning_effort
        return {"top_k": self.cfg.top_k, "chat_template_kwargs": kwargs}

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
             seed: int | None = None, max_tokens: int | None = None,
             deadline: float | None = None) -> Reply:
        """One completion, retried across URLs. `deadline` (monotonic) bounds the whole call."""
        last: ModelError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                pause = self.backoff_s * 2 ** (attempt - 1) * (0.5 + self._rng.random())
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
                self.current = (self.current + 1) % len(self.urls)
            limit = self.timeout_s if deadline is None else min(self.timeout_s, deadline - time.monotonic())
            if limit <= 0:
                break
            try:
                reply = self._stream(self.current, messages, tools, seed, max_tokens, limit)
                reply.attempts, reply.seed = attempt + 1, seed
                return reply
            except ModelError as e:
                last = e
                log.warning("model request to %s failed (attempt %d): %s", self.urls[self.current],
                            attempt + 1, e)
                if not e.retryable:
                    raise
        raise last or ModelError("no time left for a model request", retryable=True)

    def _stream(self, i: int, messages, tools, seed, max_tokens, limit: float) -> Reply:
        c = self.cfg
        kwargs: dict[str, Any] = dict(model=c.name, messages=messages, stream=True,
                                      stream_options={"include_usage": True},
                                      temperature=c.temperature, top_p=c.top_p,
                                      max_tokens=max_tokens or c.max_output_tokens,
                                      extra_body=self.body())
        if tools:
            kwargs["tools"] = tools
        if seed is not None:
            kwargs["seed"] = seed
        t0 = time.monotonic()
        reply = Reply(url=self.urls[i], keep_thinking=c.cut_thinking_chars)
        parts: dict[str, list[str]] = {"content": [], "reasoning": []}
        calls: dict[int, dict[str, Any]] = {}
        try:
            stream = self._clients[i].chat.completions.create(**kwargs)
        except openai.APIStatusError as e:
            raise _status_error(e) from e
        except (openai.APITimeoutError, openai.APIConnectionError) as e:
            raise ModelError(f"{type(e).__name__}: {e}", retryable=True) from e
        try:
            for chunk in stream:
                if chunk.usage is not None:
                    _usage(reply, chunk.usage)
                for choice in chunk.choices or []:
                    if reply.first_token_s is None:
                        reply.first_token_s = time.monotonic() - t0
                    _delta(choice.delta, parts, calls)
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
                if time.monotonic() - t0 > limit:
                    reply.cut = "timeout"
                    break
        except openai.APIStatusError as e:
            raise _status_error(e) from e
        except Exception as e:  # a stall or a broken connection mid-reply (httpx/openai errors)
            if not (parts["content"] or parts["reasoning"] or calls):
                raise ModelError(f"{type(e).__name__}: {e}", retryable=True) from e
            reply.cut = "timeout"  # keep what arrived
        finally:
            try:
                stream.close()
            except Exception:  # closing a broken stream must not hide the reply
                pass
        reply.latency_s = time.monotonic() - t0
        reply.content = "".join(parts["content"])
        reply.reasoning = "".join(parts["reasoning"])
        if reply.cut is None and (reply.finish_reason == "length" or (
                reply.completion_tokens is not None and reply.completion_tokens >= kwargs["max_tokens"])):
            reply.cut = "length"  # (vLLM 0.19 says "tool_calls" when the cap cut a call)
        every = [ToolCall(c["id"] or f"call_{k}", c["name"], "".join(c["args"])) for k, c in sorted(calls.items())]
        # ("" is `{}` to vLLM: kept when the reply ended normally, and the agent says the code is missing)
        keep = [json_object(c.arguments) or (c.arguments == "" and reply.cut is None) for c in every]
        reply.tool_calls = [c for c, k in zip(every, keep) if k]
        reply.dropped = [{"name": c.name, "why": reply.cut or "invalid", "arguments": c.arguments}
                         for c, k in zip(every, keep) if not k]
        if reply.dropped:
            log.warning("dropped %d tool call(s) with unreadable arguments (%s)", len(reply.dropped),
                        reply.dropped[0]["why"])
        return reply

    def tokenize(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 generation: bool = False) -> int:
        """Tokens of `messages` as the served model counts them (vLLM's `/tokenize`: its chat
        template with this client's template kwargs, the generation prompt when `generation`).
        One try on the current URL with a short time-out; raises ModelError (the caller
        estimates instead)."""
        body: dict[str, Any] = {"model": self.cfg.name, "messages": messages, "add_generation_prompt": generation,
                                "chat_template_kwargs": self.body()["chat_template_kwargs"]}
        if tools:
            body["tools"] = tools
        root = self.urls[self.current].removesuffix("/v1")
        req = urllib.request.Request(root + "/tokenize", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=min(10.0, self.cfg.stall_s)) as r:
                return int(json.loads(r.read())["count"])
        except Exception as e:  # HTTP errors, time-outs, a server without the route, bad JSON
            raise ModelError(f"/tokenize: {type(e).__name__}: {e}", retryable=True) from e

    def counter(self, tools: list[dict[str, Any]] | None = None) -> TokenCounter:
        """Per-message token counts from this server, cached, estimated where it cannot say."""
        return TokenCounter(lambda msgs, generation=False: self.tokenize(
            msgs, tools if msgs[0].get("role") == "system" else None, generation))


def _v1(url: str) -> str:
    return url if url.endswith("/v1") else url + "/v1"


def _delta(delta: Any, parts: dict[str, list[str]], calls: dict[int, dict[str, Any]]) -> None:
    if delta is None:
        return
    if delta.content:
        parts["content"].append(delta.content)
    extra = delta.model_extra or {}
    reasoning = extra.get("reasoning") or extra.get("reasoning_content")
    if reasoning:
        parts["reasoning"].append(reasoning)
    for tc in delta.tool_calls or []:
        slot = calls.setdefault(tc.index if tc.index is not None else len(calls),
                                {"id": "", "name": "", "args": []})
        if tc.id:
            slot["id"] = tc.id
        if tc.function is not None:
            if tc.function.name:
                slot["name"] += tc.function.name
            if tc.function.arguments:
                slot["args"].append(tc.function.arguments)


def _usage(reply: Reply, usage: Any) -> None:
    reply.prompt_tokens = usage.prompt_tokens
    reply.completion_tokens = usage.completion_tokens
    details = getattr(usage, "prompt_tokens_details", None)
    if details is not None and getattr(details, "cached_tokens", None) is not None:
        reply.cached_tokens = details.cached_tokens


def json_object(text: str | None) -> bool:
    """True when `text` is a complete JSON object: the only tool-call arguments a server
    accepts back in the history (vLLM 0.19 answers 400 to anything else)."""
    try:
        return isinstance(json.loads(text or ""), dict)
    except ValueError:
        return False


def empty_call(arguments: str | None) -> bool:
    """True when a call's arguments hold no code at all: "" or a JSON object without a
    non-blank string in it (`{}`, `{"code": ""}`)."""
    try:
        doc = json.loads(arguments or "{}")
    except ValueError:
        return False  # unreadable is not empty (the client drops it as `invalid`)
    return isinstance(doc, dict) and not any(isinstance(v, str) and v.strip() for v in doc.values())


def _status_error(e: openai.APIStatusError) -> ModelError:
    status = e.status_code
    text = str(e)
    if status == 400 and any(k in text.lower() for k in ("context length", "maximum context",
                                                         "too long", "max_model_len")):
        return ContextOverflow(f"HTTP {status}: {text}", status=status)
    return ModelError(f"HTTP {status}: {text}", retryable=status in (408, 409, 429) or status >= 500,
                      status=status)


def smoke_chat(url: str, config: ModelConfig, *, timeout_s: float, max_tokens: int = 16,
               retries: int | None = None) -> Reply:
    """One short greedy chat with thinking off: what proves a server answers (a wedged vLLM
    still lists its models but fails this). Raises ModelError."""
    quiet = config.model_copy(update={"temperature": 0.0, "top_p": 1.0, "top_k": 1, "thinking": False,
                                      "preserve_thinking": None, "max_output_tokens": max_tokens,
                                      "timeout_s": timeout_s, "retries": config.retries if retries is None else retries})
    return ModelClient(url, quiet).chat([{"role": "user", "content": "Reply with the single word OK."}], seed=0)


def list_models(url: str, timeout: float = 5.0) -> list[str]:
    """The model ids a server offers (its `/v1/models`); raises on any failure."""
    with urllib.request.urlopen(_v1(url.rstrip("/")) + "/models", timeout=timeout) as r:
        return [m["id"] for m in json.loads(r.read()).get("data", [])]


def join_urls(values: Iterable[str] | str | None) -> list[str]:
    """`"http://a,http://b"` or a list of them → a flat list of URLs."""
    if not values:
        return []
    if isinstance(values, str):
        values = [values]
    return [u.strip() for v in values for u in v.split(",") if u.strip()]
