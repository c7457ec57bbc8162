"""What a hosted OpenAI-compatible provider needs from the client (the `hosted` profile,
DESIGN §1c): the key read from the environment, extra headers, `Retry-After`, and the
request fields each kind of server takes.

* The key: `model.api_key_env` names the environment variable that holds it; the key is
  read when a client is made, sent as `Authorization: Bearer`, kept out of every message
  the client writes (`redact`) and never stored. A vLLM profile without a name sends "EMPTY".
* Headers: `model.headers`, a value `$NAME` read from that variable (redacted too).
* `Retry-After` of a 429 or 503 (seconds, `retry-after-ms`, or an HTTP date): the client
  waits that long before its next try instead of its own back-off.
* The probe before a run (duck.llm.probe) says in one line what stops the agent working with
  a provider (`ProviderError`).
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


def fields(cfg: ModelConfig, hosted: bool) -> dict[str, Any]:
    """The request fields beyond the standard ones: vLLM's `top_k`, `chat_template_kwargs` and
    `return_token_ids` (as `extra_body`), or on a hosted profile only the standard
    `reasoning_effort` when set."""
    if hosted:
        return {"reasoning_effort": cfg.reasoning_effort} if cfg.reasoning_effort is not None else {}
    kwargs: dict[str, Any] = {"enable_thinking": cfg.thinking}
    if cfg.preserve_thinking is not None:
        kwargs["preserve_thinking"] = cfg.preserve_thinking
    if cfg.reasoning_effort is not None:  # (Qwen3.8's template: xhigh, medium or low)
        kwargs["reasoning_effort"] = cfg.reasoning_effort
    # `return_token_ids`: the sampled tokens per chunk (vLLM >= 0.11), kept for training (duck.train)
    return {"extra_body": {"top_k": cfg.top_k, "chat_template_kwargs": kwargs, "return_token_ids": True}}
