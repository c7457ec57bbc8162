"""The model client: one OpenAI-compatible chat endpoint (vLLM) or several, one per GPU, or a
hosted provider (the `hosted` profile: duck.llm.provider).

`ModelClient.chat(messages, tools, seed=...)` streams one chat completion and returns a `Reply`
(visible text, reasoning, tool calls, finish reason, the server's token usage and timings;
on vLLM the sampled token ids). The rule: what was received is never lost, and nothing the
server would refuse ever leaves it. Only our own time limit cuts a reply (`Reply.cut`); a failure
mid-reply is retried with back-off over the base URLs; past reasoning goes back in the field the
template reads; a tool call whose arguments are not a complete JSON object is dropped and named
in `Reply.dropped`. Each guarantee and the failure of the Duck's that it answers: docs/agent.md,
"The model client".
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any, Iterable

import urllib.request

import openai
from openai import OpenAI

import duck.config.profiles as profiles
from duck.config import ModelConfig
from duck.llm import guard as spend, provider
from duck.llm.reply import VLLM_NAMES, Reply, ToolCall, details_text, empty_call, json_object, merge_details
from duck.llm.tokens import TokenCounter
from duck.seeds import stable_hash

__all__ = ["ContextOverflow", "ModelClient", "ModelError", "Reply", "ToolCall", "empty_call", "join_urls",
           "json_object", "list_models", "pick_url", "request_seed", "smoke_chat"]

log = logging.getLogger(__name__)


class ModelError(RuntimeError):
    """The model server could not give a reply (after retries, or a request it refuses)."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None, cut: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after  # seconds the server asked to wait (429/503 Retry-After)
        self.cut = cut  # "error": the reply failed after its first tokens (thrown away, not kept)


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


class ModelClient:
    """Chat completions against one or several OpenAI-compatible base URLs, with the sampling,
    time-outs and retries of a ModelConfig (the one place their defaults live)."""

    def __init__(self, urls: list[str] | str, config: ModelConfig, *, start: int = 0,
                 api_key: str | None = None, session: str | None = None,
                 guard: spend.Guard | None = None) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ModelError("no model URL configured")
        self.cfg = config
        self.hosted = profiles.get(config.profile).hosted
        self.current = start % len(self.urls)
        self.guard = guard or spend.current()
        key = provider.api_key(config) if api_key is None else api_key  # (ProviderError: no such variable)
        self._hidden = provider.secrets(config) if api_key is None else [api_key]
        # One client per URL; the openai client's own retries are off (ours move across URLs).
        timeout = openai.Timeout(connect=10.0, read=config.stall_s, write=30.0, pool=10.0)
        headers = provider.headers(config) | ({"X-Duck-Session": session} if session else {})  # (vLLM ignores it)
        self._clients = [OpenAI(base_url=_v1(u), api_key=key, timeout=timeout, max_retries=0,
                                default_headers=headers or None) for u in self.urls]
        self._rng = random.Random(start)

    def body(self) -> dict[str, Any]:
        """The non-OpenAI fields vLLM reads from the request body ({} on a hosted profile)."""
        return provider.fields(self.cfg, False)["extra_body"] if not self.hosted else {}

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
             seed: int | None = None, max_tokens: int | None = None,
             deadline: float | None = None) -> Reply:
        """One completion, retried across URLs. `deadline` (monotonic) bounds the whole call."""
        last: ModelError | None = None
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                pause = self.cfg.backoff_s * 2 ** (attempt - 1) * (0.5 + self._rng.random())
                if last is not None and last.retry_after is not None:  # the provider's own (429/503)
                    pause = min(last.retry_after, 120.0)  # (never an hour that Ctrl-C would wait out)
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
                if last is None or last.retry_after is None:
                    self.current = (self.current + 1) % len(self.urls)
            limit = self.cfg.timeout_s if deadline is None else min(self.cfg.timeout_s, deadline - time.monotonic())
            if limit <= 0:
                break
            try:
                reply = self._stream(self.current, messages, tools, seed, max_tokens, limit)
                reply.attempts, reply.seed = attempt + 1, seed
                if self.guard is not None:
                    self.guard.add(reply.stats())
                return reply
            except ModelError as e:
                last = e
                log.warning("model request to %s failed (attempt %d): %s", self.urls[self.current],
                            attempt + 1, e)
                if e.status in provider.REFUSED_KEY and self.guard is not None:
                    self.guard.halt(f"the model provider refused the key: {e}")  # the run stops, like Ctrl-C
                if not e.retryable:
                    raise
        raise last or ModelError("no time left for a model request", retryable=True)

    def _stream(self, i: int, messages, tools, seed, max_tokens, limit: float) -> Reply:
        c = self.cfg
        kwargs: dict[str, Any] = dict(model=c.name, messages=messages, stream=True,
                                      stream_options={"include_usage": True},
                                      temperature=c.temperature, top_p=c.top_p,
                                      max_tokens=max_tokens or c.max_output_tokens,
                                      **provider.fields(c, self.hosted))
        if tools:
            kwargs["tools"] = tools
        if seed is not None:
            kwargs["seed"] = seed
        # No byte for stall_s ends the request; near our limit, the limit itself does.
        kwargs["timeout"] = openai.Timeout(connect=10.0, read=max(0.1, min(c.stall_s, limit)), write=30.0, pool=10.0)
        t0 = time.monotonic()
        reply = Reply(url=self.urls[i], keep_thinking=c.cut_thinking_chars)
        parts: dict[str, Any] = {"content": [], "reasoning": [], "details": [], "names": set(), "ids": []}
        calls: dict[int, dict[str, Any]] = {}
        try:
            stream = self._clients[i].chat.completions.create(**kwargs)
        except openai.APIStatusError as e:
            raise self._status_error(e) from e
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
                    # (vLLM's return_token_ids: the sampled tokens of this chunk)
                    parts["ids"].extend((choice.model_extra or {}).get("token_ids") or ())
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
                if time.monotonic() - t0 > limit:
                    reply.cut = "timeout"
                    break
        except openai.APIStatusError as e:
            raise self._status_error(e) from e
        except Exception as e:  # an error chunk, a stall or a broken connection (httpx/openai errors)
            started = parts["content"] or parts["reasoning"] or parts["details"] or calls
            if isinstance(e, openai.APITimeoutError) and time.monotonic() - t0 >= limit and started:
                reply.cut = "timeout"  # our own limit passed during a silence: keep what arrived
            else:
                raise _failed(e, parts, calls) from e
        finally:
            try:
                stream.close()
            except Exception:  # closing a broken stream must not hide the reply
                pass
        if reply.cut is None and reply.finish_reason is None:  # the body ended, the reply did not
            raise _failed(None, parts, calls)
        reply.latency_s = time.monotonic() - t0
        self._assemble(reply, parts, calls, kwargs["max_tokens"])
        return reply

    def _assemble(self, reply: Reply, parts: dict[str, Any], calls: dict[int, dict[str, Any]], cap: int) -> None:
        """The streamed pieces into the reply: text, reasoning (and the field(s) it goes back
        under: duck.llm.reply), the cut, and the tool calls kept or dropped."""
        reply.content = "".join(parts["content"])
        reply.reasoning = "".join(parts["reasoning"]) or details_text(parts["details"])
        reply.details = parts["details"]
        reply.token_ids = [int(i) for i in parts["ids"]] or None
        field = self.cfg.reasoning_field
        reply.reasoning_as = (() if field == "none" else (field,) if field != "auto" else VLLM_NAMES
                              if not self.hosted else tuple(n for n in ("reasoning", "reasoning_content",
                                                                        "reasoning_details") if n in parts["names"]))
        if reply.cut is None and (reply.finish_reason == "length" or (
                reply.completion_tokens is not None and reply.completion_tokens >= cap)):
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

    def _status_error(self, e: openai.APIStatusError) -> "ModelError":
        status = e.status_code
        text = provider.redact(str(e), self._hidden)  # (a provider may echo part of a key)
        if status == 400 and any(k in text.lower() for k in ("context length", "maximum context",
                                                             "too long", "max_model_len")):
            return ContextOverflow(f"HTTP {status}: {text}", status=status)
        return ModelError(f"HTTP {status}: {text}", retryable=status in (408, 409, 429) or status >= 500,
                          status=status, retry_after=provider.retry_after(e) if status in (429, 503) else None)

    def tokenize(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 generation: bool = False) -> int:
        """Tokens of `messages` as the served model counts them (vLLM's `/tokenize`: its chat
        template with this client's template kwargs, the generation prompt when `generation`).
        One try on the current URL with a short time-out; raises ModelError (the caller
        estimates instead)."""
        body: dict[str, Any] = {"model": self.cfg.name, "messages": messages, "add_generation_prompt": generation,
                                "chat_template_kwargs": self.body().get("chat_template_kwargs")}
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
        """Per-message token counts from this server, cached, estimated where it cannot say; a
        hosted provider has no `/tokenize`: estimates only, calibrated on each reply's `usage`
        (duck.agent.context)."""
        if self.hosted:
            return TokenCounter(None)
        return TokenCounter(lambda msgs, generation=False: self.tokenize(
            msgs, tools if msgs[0].get("role") == "system" else None, generation))


def _failed(e: Exception | None, parts: dict[str, Any], calls: dict[int, dict[str, Any]]) -> ModelError:
    """The failure of a stream that broke (`e`: the error chunk or the transport's error;
    None: it ended without a finish reason). Retryable unless an error chunk names a 4xx
    other than 408/409/429; `cut="error"` once anything of the reply had arrived."""
    got = sum(len(x) for x in parts["content"] + parts["reasoning"]) + sum(len(a) for c in calls.values() for a in c["args"])
    started = bool(got or parts["details"] or calls)
    body = getattr(e, "body", None)
    status = body.get("code") if isinstance(body, dict) and isinstance(body.get("code"), int) else None
    why = "the stream ended without a finish reason" if e is None else f"{type(e).__name__}: {e}"
    where = f"mid-reply ({got} characters received, not kept)" if started else "before any token"
    return ModelError(f"{why} {where}", retryable=status is None or status in (408, 409, 429) or status >= 500,
                      status=status, cut="error" if started else None)


def _v1(url: str) -> str:
    return url if url.endswith("/v1") else url + "/v1"


def _delta(delta: Any, parts: dict[str, Any], calls: dict[int, dict[str, Any]]) -> None:
    if delta is None:
        return
    if delta.content:
        parts["content"].append(delta.content)
    extra = delta.model_extra or {}
    names = [n for n in ("reasoning", "reasoning_content", "reasoning_details") if extra.get(n)]
    parts["names"].update(names)
    reasoning = extra.get("reasoning") or extra.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts["reasoning"].append(reasoning)
    if isinstance(extra.get("reasoning_details"), list):
        merge_details(parts["details"], extra["reasoning_details"])
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
    reply.usage = usage.model_dump(exclude_none=True)
    cost = reply.usage.get("cost")  # (OpenRouter's, in its credits: USD)
    reply.cost = float(cost) if isinstance(cost, (int, float)) else None


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
