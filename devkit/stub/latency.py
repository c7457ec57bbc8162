"""A latency model for the stub server: how long a loaded vLLM takes to answer (issues 17, 26).

The stub server answers at once unless it is given a `LatencyModel`; with one, every request
goes through `Engine`, which makes it wait as a single GPU serving many games would: admission
(at most `max_num_seqs` requests running, their tokens within the KV pool `kv_tokens`, the
others waiting in order), prefill (`ttft_base_s` plus the uncached prompt tokens at
`prefill_tps`, shared by the requests prefilling at once), and decode (the field's
`decode_tps_1 · n^decode_exponent` tokens per second in total while n streams decode, n read
again at every chunk). Streams are paced in chunks of `tokens_per_chunk`, so the client parses
as many chunks as it would from vLLM. The defaults are the field's Flash-Next figures and the
default profile's plan; `speed` divides every time (tests run the same model 20x faster).
Each term, its default and its source: docs/workbench.md, "The latency model".
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import duck.config.profiles as profiles

_PLAN = profiles.plan(profiles.DEFAULT_PROFILE)


@dataclass(frozen=True)
class LatencyModel:
    decode_tps_1: float = 169.0  # aggregate decode tokens/s with one stream (FIELD §4)
    decode_exponent: float = 0.6  # aggregate = decode_tps_1 * streams ** decode_exponent
    prefill_tps: float = 11000.0  # FIELD §4: 11-12.6K tokens/s
    ttft_base_s: float = 0.05
    max_num_seqs: int = _PLAN.max_num_seqs
    kv_tokens: int | None = _PLAN.kv_tokens
    chunk_tokens: int = 1
    # Tokens an engine step yields: with MTP (3 drafted) 1 + the drafts accepted, 2.6-2.9 on
    # average (FIELD §4); 1 without. At a stream interval below it a chunk is one step.
    step_tokens: float = 2.7
    speed: float = 1.0

    def __post_init__(self) -> None:
        if self.decode_tps_1 <= 0 or self.prefill_tps <= 0 or self.speed <= 0:
            raise ValueError("latency model: rates and speed must be positive")
        if not 0 < self.decode_exponent <= 1:
            raise ValueError("latency model: a stream must not be faster when more streams share the GPU "
                             "(0 < decode_exponent <= 1)")
        if self.max_num_seqs < 1 or self.chunk_tokens < 1 or self.step_tokens < 1:
            raise ValueError("latency model: max_num_seqs, chunk_tokens and step_tokens must be at least 1")

    @property
    def tokens_per_chunk(self) -> float:
        """What one streamed chunk carries: the stream interval, or one engine step if more."""
        return max(float(self.chunk_tokens), self.step_tokens)

    def total_tps(self, streams: int) -> float:
        """Tokens per second the server generates while `streams` decode together."""
        return self.decode_tps_1 * max(1, streams) ** self.decode_exponent

    def stream_tps(self, streams: int) -> float:
        """Tokens per second one stream gets while `streams` decode together."""
        return self.total_tps(streams) / max(1, streams)

    def describe(self) -> dict[str, Any]:
        return asdict(self) | {"total_tps": {n: round(self.total_tps(n), 1) for n in (1, 10, 16)},
                               "stream_tps": {n: round(self.stream_tps(n), 1) for n in (1, 10, 16)}}

    @classmethod
    def parse(cls, spec: str) -> "LatencyModel":
        """`"default"` or `"speed=20,kv_tokens=178000"` (fields of this class; `none` for None)."""
        kwargs: dict[str, Any] = {}
        for part in (p.strip() for p in spec.split(",")):
            if not part or part == "default":
                continue
            key, _, value = part.partition("=")
            if key not in cls.__dataclass_fields__ or not value:
                raise ValueError(f"latency model: unknown or empty setting {part!r} "
                                 f"(settings: {', '.join(cls.__dataclass_fields__)})")
            kwargs[key] = None if value == "none" else (int(value) if key in ("max_num_seqs", "kv_tokens",
                                                                               "chunk_tokens")
                                                        else float(value))
        return cls(**kwargs)


class Engine:
    """The server's load: which requests wait, prefill or decode, and for how long each must
    sleep. One per stub server; thread-safe (one handler thread per request)."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.cond = threading.Condition()
        self.waiting: list[object] = []  # admission order
        self.running = 0
        self.prefilling = 0
        self.decoding = 0
        self.kv_used = 0

    def _fits(self, need: int) -> bool:
        m = self.model
        if self.running >= m.max_num_seqs:
            return False
        return m.kv_tokens is None or self.running == 0 or self.kv_used + need <= m.kv_tokens

    @contextmanager
    def request(self, prompt_tokens: int, cached_tokens: int, reply_tokens: int) -> Iterator["Stream"]:
        """Admit one request (waiting for a slot and KV room), then yield its Stream."""
        need = prompt_tokens + reply_tokens
        ticket = object()
        with self.cond:
            self.waiting.append(ticket)
            while self.waiting[0] is not ticket or not self._fits(need):
                self.cond.wait(0.5)
            self.waiting.pop(0)
            self.running += 1
            self.kv_used += need
            self.cond.notify_all()
        stream = Stream(self, max(0, prompt_tokens - cached_tokens))
        try:
            yield stream
        finally:
            with self.cond:
                stream._leave()
                self.running -= 1
                self.kv_used -= need
                self.cond.notify_all()

    def snapshot(self) -> dict[str, float]:
        with self.cond:
            kv = self.model.kv_tokens
            return {"running": self.running, "waiting": len(self.waiting),
                    "kv_usage": (self.kv_used / kv) if kv else 0.0}


class Stream:
    """One admitted request: `prefill()` once, then `decode(tokens)` for each piece it sends."""

    TICK_S = 0.1  # how often a prefill looks again at how many share the prefill rate

    def __init__(self, engine: Engine, uncached: int) -> None:
        self.engine, self.uncached = engine, uncached
        self.phase = "new"
        self.next_t: float | None = None  # when the next token is due (decode pacing)

    def prefill(self) -> None:
        e, m = self.engine, self.engine.model
        with e.cond:
            e.prefilling += 1
            self.phase = "prefill"
        try:
            time.sleep(m.ttft_base_s / m.speed)
            left = float(self.uncached)
            # (Down to half a token, not to 0: `left -= left / rate * rate` can leave a residue
            # that never reaches 0, and 0.5% of prefills spun for ever: a 60 s stall in the bench.)
            while left >= 0.5:
                rate = m.prefill_tps * m.speed / max(1, e.prefilling)
                dt = min(left / rate, self.TICK_S)
                time.sleep(dt)
                left -= dt * rate
        finally:
            with e.cond:
                e.prefilling -= 1
                e.decoding += 1
                self.phase = "decode"
        self.next_t = time.monotonic()

    def decode(self, tokens: float) -> None:
        """Sleep until `tokens` more tokens would have been generated at the current rate."""
        if self.phase != "decode":
            self.prefill()
        m = self.engine.model
        self.next_t += tokens / (self.engine.model.stream_tps(self.engine.decoding) * m.speed)
        delay = self.next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            self.next_t = time.monotonic()  # a slow reader does not get a burst afterwards

    def _leave(self) -> None:
        if self.phase == "prefill":
            self.engine.prefilling -= 1
        elif self.phase == "decode":
            self.engine.decoding -= 1
        self.phase = "done"
