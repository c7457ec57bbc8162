"""`duck stub-server --hosted`: the stub as a strict hosted provider answers, for the tests of
the `hosted` profile (duck.llm.provider).

What it does that the vLLM stand-in does not: a key (`api_key`: a chat without it is 401, the
model list stays public); standard OpenAI fields only (anything else, or one of `refuse_fields`,
is 400 "Unrecognized request argument supplied"); no `/tokenize` and no `/metrics`; reasoning
under `reasoning` only; `usage` with a `cost` (`price`); a 429 with `Retry-After` every
`rate_limit`-th chat request; `without` tool calls or images. Each answer as a provider gives
it: docs/hosted.md, "The stub as a provider".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# The request body of OpenAI's chat completions API (what a strict provider accepts).
STANDARD = frozenset({
    "model", "messages", "stream", "stream_options", "temperature", "top_p", "max_tokens",
    "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls", "seed", "reasoning_effort", "n",
    "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "response_format",
    "user", "metadata", "store", "modalities", "service_tier", "prediction", "audio", "web_search_options"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "reasoning",
                            "reasoning_details"})


@dataclass
class Hosted:
    api_key: str | None = None  # the key it accepts (None: any, or none)
    rate_limit: int = 0  # every Nth chat request answers 429 (0: never)
    retry_after_s: float = 1.0
    without: frozenset[str] = frozenset()  # "tools", "images"
    refuse_fields: frozenset[str] = frozenset()  # standard fields this provider refuses too (e.g. "seed")
    price: tuple[float, float] | None = (0.2, 0.8)  # USD per million prompt / completion tokens (None: no cost)
    requests: int = 0  # chat requests past the key check
    rate_limited: int = 0  # of which answered 429
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse(self, headers: Any, body: dict[str, Any]) -> tuple[int, str, dict[str, str]] | None:
        """(status, message, headers) when this provider refuses the chat request, else None."""
        if self.api_key is not None and headers.get("Authorization") != f"Bearer {self.api_key}":
            return 401, "Incorrect API key provided. You can find your API key in your account settings.", {}
        unknown = sorted((set(body) - STANDARD) | (set(body) & self.refuse_fields))
        if unknown:
            return 400, f"Unrecognized request argument supplied: {', '.join(unknown)}", {}
        for i, m in enumerate(body.get("messages") or []):
            extra = sorted(set(m) - MESSAGE_FIELDS) if isinstance(m, dict) else []
            if extra:
                return 400, f"messages[{i}]: Unrecognized field supplied: {', '.join(extra)}", {}
        if "images" in self.without and _has_image(body):
            return 404, "No endpoints found that support image input", {}
        with self.lock:
            self.requests += 1
            if self.rate_limit and self.requests % self.rate_limit == 0:
                self.rate_limited += 1
                return 429, "Rate limit exceeded: free-models-per-min", {"Retry-After": f"{self.retry_after_s:g}"}
        return None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.price is None:
            return None
        return round((prompt_tokens * self.price[0] + completion_tokens * self.price[1]) / 1e6, 8)

    @classmethod
    def parse(cls, key: str | None, rate_limit: int, retry_after_s: float, without: list[str],
              refuse: list[str]) -> "Hosted":
        bad = [w for w in without if w not in ("tools", "images")]
        if bad:
            raise ValueError(f"--without {', '.join(bad)}: one of tools, images")
        return cls(api_key=key, rate_limit=rate_limit, retry_after_s=retry_after_s, without=frozenset(without),
                   refuse_fields=frozenset(refuse))


def _has_image(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) and any(isinstance(p, dict) and p.get("type") == "image_url"
                                                           for p in m["content"])
               for m in body.get("messages") or [] if isinstance(m, dict))
