"""What a hosted OpenAI-compatible provider needs from the client (the `hosted` profile,
DESIGN §1c): the key read from the environment, extra headers, `Retry-After`, and a probe
that says in one line, before anything plays, what stops the agent from working with it.

* The key: `model.api_key_env` names the environment variable that holds it; the key is
  read when a client is made, sent as `Authorization: Bearer`, kept out of every message
  the client writes (`redact`) and never stored. A vLLM profile without a name sends "EMPTY".
* Headers: `model.headers`, a value `$NAME` read from that variable (redacted too).
* `Retry-After` of a 429 or 503 (seconds, `retry-after-ms`, or an HTTP date): the client
  waits that long before its next try instead of its own back-off.
* `preflight(url, cfg)`: one small request as the agent makes them (the python tool, a
  board image, the profile's sampling fields) that must come back with a tool call. It turns
  what would otherwise fail every game (a missing key variable, a refused key 401/403, no
  credit 402, a field the provider refuses, a model without tool calls or without images, a
  cost cap on a provider that reports no cost) into one line (`ProviderError`).
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from typing import TYPE_CHECKING, Any

from duck.config import ModelConfig

if TYPE_CHECKING:
    import openai

# A 1x1 PNG: the probe's image (whether the provider takes images at all).
PROBE_PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
             "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
PROBE_TOOL = [{"type": "function", "function": {
    "name": "python", "description": "Run Python code.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]
PROBE = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PROBE_PNG}},
                                      {"type": "text", "text": "Call the python tool with the code print(1)."}]}]
REFUSED_KEY = (401, 402, 403)  # the key refused, no credit: no retry, the run stops (duck.llm.guard)


class ProviderError(RuntimeError):
    """The provider cannot serve the agent, said in one line (nothing played yet)."""


def api_key(cfg: ModelConfig, env: dict[str, str] | None = None) -> str:
    """The key from the variable `model.api_key_env` names ("EMPTY" where none is named)."""
    name = cfg.api_key_env
    if not name:
        return "EMPTY"
    value = (os.environ if env is None else env).get(name, "")
    if not value.strip():
        raise ProviderError(f"model.api_key_env names {name}, which is not set in this environment: "
                            f"export {name}=<your provider's key> (the key never goes into a config)")
    return value.strip()


def headers(cfg: ModelConfig, env: dict[str, str] | None = None) -> dict[str, str]:
    """`model.headers` with each `$NAME` value read from the environment."""
    env = os.environ if env is None else env
    out = {}
    for name, value in cfg.headers.items():
        if value.startswith("$"):
            var = value[1:].strip("{}")
            if not env.get(var):
                raise ProviderError(f"model.headers.{name} reads ${var}, which is not set in this environment")
            value = env[var]
        out[name] = value
    return out


def secrets(cfg: ModelConfig, env: dict[str, str] | None = None) -> list[str]:
    """The values no message may carry: the key and the headers read from the environment."""
    out = [api_key(cfg, env)] if cfg.api_key_env else []
    out += [v for k, v in headers(cfg, env).items() if cfg.headers[k].startswith("$")]
    return [s for s in out if len(s) >= 4]


def redact(text: str, hidden: list[str]) -> str:
    for s in hidden:
        text = text.replace(s, "***")
    return text


def retry_after(error: "openai.APIStatusError") -> float | None:
    """Seconds a 429/503 asks the client to wait (`retry-after-ms`, `retry-after`: seconds or
    an HTTP date), or None."""
    h = getattr(getattr(error, "response", None), "headers", None) or {}
    try:
        if h.get("retry-after-ms"):
            return max(0.0, float(h["retry-after-ms"]) / 1000)
        value = h.get("retry-after")
        if not value:
            return None
        if re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
            return max(0.0, float(value))
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def preflight(url: str, cfg: ModelConfig) -> None:
    """One probe request (module docstring); raises ProviderError with the one line to print.
    Connection failures pass through as ModelError (the caller's "no server answers")."""
    from duck.llm.client import ModelClient, ModelError
    probe = cfg.model_copy(update={"max_output_tokens": min(cfg.max_output_tokens, 2048), "retries": 1})
    client = ModelClient(url, probe)  # (a missing key variable raises here)
    where = f"the provider at {url}"
    try:
        reply = client.chat(PROBE, PROBE_TOOL, seed=0)
    except ModelError as e:
        if e.status is None or e.status >= 500 or e.status in (408, 429):
            raise  # unreachable or busy: not a verdict on the provider
        raise ProviderError(f"{where} refused the agent's request: {_why(e.status, str(e), cfg.api_key_env)}") from None
    if cfg.max_cost and reply.cost is None:
        raise ProviderError(f"model.max_cost is set but {where} reports no cost in its usage: cap the tokens "
                            "with model.max_total_tokens instead")
    if not reply.tool_calls and reply.finish_reason != "length" and not reply.cut:
        raise ProviderError(f"{where} answered {cfg.name} without a tool call (the probe asked for one): the agent "
                            "needs a model served with tool-call support")


def check(cfg: ModelConfig) -> str | None:
    """Before a run: None when a URL of `model.urls` serves the agent (the probe), else why no
    server answers (one line); raises ProviderError when one answers but cannot serve it."""
    from duck.llm.client import ModelError
    api_key(cfg)  # a missing variable is said before any request
    problems = []
    for url in cfg.urls:
        try:
            preflight(url, cfg)
            return None
        except ModelError as e:
            problems.append(f"{url} ({e})")
    return f"--policy llm: no model server answers at {'; '.join(problems)}" if problems else \
        "--policy llm needs a model server: --model-url URL (or model.urls)"


def _why(status: int, message: str, variable: str) -> str:
    message = message.split(" - ", 1)[-1]  # (the openai client's "HTTP 400: Error code: 400 - " prefix)
    text = message.lower()
    if status in (401, 403):
        return f"HTTP {status}: the key in ${variable or '(none: model.api_key_env)'} is refused ({message[:200]})"
    if status == 402:
        return f"HTTP 402: no credit left on the key ({message[:200]})"
    if "image" in text or "vision" in text or "multimodal" in text:
        return f"the model takes no images, and the agent shows the board as one ({message[:200]})"
    if "tool" in text or "function" in text:
        return f"the model takes no tool calls, and the agent acts through one ({message[:200]})"
    if any(k in text for k in ("unrecognized", "unknown", "not permitted", "extra", "unsupported")):
        return f"it refuses a field the client sends ({message[:240]}); the hosted profile sends standard OpenAI fields only"
    return message[:300]


def fields(cfg: ModelConfig, hosted: bool) -> dict[str, Any]:
    """The request fields beyond the standard ones: vLLM's `top_k` and `chat_template_kwargs`
    (as `extra_body`), or on a hosted profile only the standard `reasoning_effort` when set."""
    if hosted:
        return {"reasoning_effort": cfg.reasoning_effort} if cfg.reasoning_effort is not None else {}
    kwargs: dict[str, Any] = {"enable_thinking": cfg.thinking}
    if cfg.preserve_thinking is not None:
        kwargs["preserve_thinking"] = cfg.preserve_thinking
    if cfg.reasoning_effort is not None:  # (Qwen3.8's template: xhigh, medium or low)
        kwargs["reasoning_effort"] = cfg.reasoning_effort
    return {"extra_body": {"top_k": cfg.top_k, "chat_template_kwargs": kwargs}}
