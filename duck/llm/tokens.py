"""Token counts of the messages the agent sends: the server's own, estimates only where it cannot say.

The context (duck.agent.context) decides a trim before it sends, so it needs each message's
tokens as the served model counts them, template and images included (chars per token differ by
kind: English 3.5-4.2, code 2.2-2.7, tool results 1.0-1.6 on Qwen3.8's tokenizer, FIELD.md §3).

* `TokenCounter.count(message)`: vLLM's `/tokenize` (POST `{base}/tokenize` with `messages`). A
  message alone is no valid chat (the template wants a user query), so it is counted as
  `[probe, message]` minus `[probe]` for one short user probe (the system message as
  `[message, probe]`, with the tools). Asked once per message content (a hash is the cache key);
  each request's `usage` re-anchors the total (duck.agent.context).
* `Estimator`: where the server cannot count (no `/tokenize`, an error), tokens from characters
  per kind (`text`, `code`, `tool`, `image`) plus a per-message overhead, each rate fitted by ridge
  least squares to every exact count seen (per-message counts, `usage` differences).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import struct
from typing import Any, Callable

import numpy as np

from duck.llm.reply import details_text
from duck.llm.vision import image_tokens as vision_tokens  # the image processor's own geometry

log = logging.getLogger(__name__)

KINDS = ("text", "code", "tool", "image", "message")
# Priors (tokens per unit of each feature) from the field's measurements on Qwen3.8's tokenizer
# (FIELD §3): English ~3.8 chars/token, code ~2.4, tool results ~1.4; an image's vision
# tokens as its size implies them; ~8 template tokens around each message (role marks, think
# tags, tool-call XML).
PRIOR = np.array([1 / 3.8, 1 / 2.4, 1 / 1.4, 1.0, 8.0])
# The prior weighs as one message of a typical size per kind (the fit moves off it after a
# few exact counts): 4,000 chars of text, 1,000 of code, 2,000 of tool output, one 640 px
# board, one message.
TYPICAL = np.array([4000.0, 1000.0, 2000.0, 402.0, 1.0])
DEFAULT_IMAGE_PX = (256, 256)  # when an image's size cannot be read


def png_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a base64 PNG data URL, from its IHDR header (no full decode)."""
    if not url.startswith("data:image/png;base64,"):
        return None
    try:
        head = base64.b64decode(url[22:22 + 32])
    except ValueError:
        return None
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def image_tokens(part: dict[str, Any]) -> int:
    url = part.get("image_url", {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
    return vision_tokens(*(png_size(url) or DEFAULT_IMAGE_PX))


def features(message: dict[str, Any]) -> np.ndarray:
    """Characters per kind, vision tokens and 1 (the message) of one chat message."""
    text = code = tool = 0.0
    images = 0.0
    content = message.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    chars = 0
    for part in parts:
        if part.get("type") == "text":
            chars += len(part.get("text") or "")
        elif part.get("type") in ("image_url", "image"):
            images += image_tokens(part)
    if message.get("role") == "tool":
        tool += chars
    else:
        text += chars
    text += len(message.get("reasoning_content") or message.get("reasoning")
                or details_text(message.get("reasoning_details") or []))
    for call in message.get("tool_calls") or []:
        code += len((call.get("function") or {}).get("arguments") or "")
    return np.array([text, code, tool, images, 1.0])


class Estimator:
    """Tokens from `features`, its rates fitted to exact counts (ridge least squares toward
    PRIOR; see the module docstring)."""

    def __init__(self) -> None:
        scale = TYPICAL ** 2
        self._a = np.diag(scale)
        self._b = scale * PRIOR
        self.w = PRIOR.copy()
        self.observations = 0

    def observe(self, x: np.ndarray, tokens: float) -> None:
        """Messages with summed features `x` took `tokens` tokens."""
        if tokens <= 0 or not np.isfinite(tokens):
            return
        self._a += np.outer(x, x)
        self._b += x * tokens
        w = np.linalg.solve(self._a, self._b)
        self.w = np.maximum(w, PRIOR * 0.1)  # rates stay positive whatever a noisy delta says
        self.observations += 1

    def tokens(self, x: np.ndarray) -> float:
        return float(x @ self.w)

    def rates(self) -> dict[str, float]:
        """Chars per token of each text kind, tokens per vision token and per message."""
        return {"text_chars_per_token": round(1 / self.w[0], 3), "code_chars_per_token": round(1 / self.w[1], 3),
                "tool_chars_per_token": round(1 / self.w[2], 3), "image_scale": round(self.w[3], 3),
                "message_tokens": round(self.w[4], 2), "observations": self.observations}


def message_key(message: dict[str, Any]) -> str:
    """A message's content hash (the cache key of its count)."""
    return hashlib.sha1(json.dumps(message, sort_keys=True, default=str).encode()).hexdigest()


PROBE = {"role": "user", "content": "."}
MAX_FAILURES = 3  # failed counts in a row before the server is not asked again


class TokenCounter:
    """Per-message token counts: the server's (`tokenize(messages) -> int`, e.g.
    duck.llm.client.ModelClient.tokenize), cached per message content, else the estimator's.
    After MAX_FAILURES failed counts in a row the server is not asked again (each failure
    costs a time-out; the estimator is calibrated by then)."""

    def __init__(self, tokenize: Callable[..., int] | None) -> None:
        self.tokenize = tokenize
        self.estimator = Estimator()
        self.failures = 0
        self.cache: dict[str, int] = {}
        self._probe: int | None = None
        self.asked = 0  # counts requested from the server (not from the cache)

    def overhead(self) -> int:
        """Prompt tokens no message's count holds: the template's own system block (Qwen3.8's
        reasoning-effort sentence) and the generation prompt. = [probe] with the generation
        prompt, less one probe message ([probe, probe] - [probe]); 0 where the server cannot say."""
        if not self.exact:
            return 0
        try:
            alone = self.tokenize([PROBE]) if self._probe is None else self._probe
            self._probe = alone
            return max(0, self.tokenize([PROBE], generation=True) - (self.tokenize([PROBE, PROBE]) - alone))
        except Exception:
            self.failures += 1
            return 0

    @property
    def exact(self) -> bool:
        """Whether counts still come from the server."""
        return self.tokenize is not None and self.failures < MAX_FAILURES

    def count(self, message: dict[str, Any]) -> tuple[int, bool]:
        """(tokens, exact) of one message."""
        key = message_key(message)
        if key in self.cache:
            return self.cache[key], True
        x = features(message)
        if self.exact:
            try:
                if self._probe is None:
                    self._probe = self.tokenize([PROBE])
                # (the system message must come first; its count then includes the tools' header)
                pair = [message, PROBE] if message.get("role") == "system" else [PROBE, message]
                n = self.tokenize(pair) - self._probe
                self.asked += 1
                self.failures = 0
                if n > 0:
                    self.cache[key] = n
                    self.estimator.observe(x, n)
                    return n, True
            except Exception as e:  # the server could not count: estimate (and say so once)
                self.failures += 1
                if self.failures == MAX_FAILURES:
                    log.warning("token counts: /tokenize failed %d times (%s); estimating from now on",
                                self.failures, e)
        return max(1, math.ceil(self.estimator.tokens(x))), False
