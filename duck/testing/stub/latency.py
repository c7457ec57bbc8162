"""A latency model for the stub server: how long a loaded vLLM takes to answer (issue 17).

The stub server answers at once unless it is given a `LatencyModel`; with one, every request
goes through `Engine`, which makes it wait as a single GPU serving many games would:

* **Admission.** At most `max_num_seqs` requests run at once and, when `kv_tokens` is set,
  the running requests' tokens (prompt + the reply's tokens, the most each will hold: vLLM
  allocates blocks as it generates and preempts when they run out) must fit in the KV cache;
  the others wait in order (vLLM's waiting queue). Off by default (`kv_tokens=None`): the 570
  tokens/s below was measured with the cache already shared out, so the default does not
  count it twice.
* **Prefill (time to first token).** `ttft_base_s` plus the prompt tokens not in the prefix
  cache (the stub's per-conversation cache emulation gives `cached_tokens`) at `prefill_tps`,
  shared by the requests prefilling at the same moment. Cached prefixes cost nothing (and are
  never evicted: the stub does not model the cache losing a game's prefix under pressure).
* **Decode.** Memory-bound: one decode step serves every running stream and costs
  `step_s(n) = a + b·n` for n streams in decode, so each stream gets 1/step_s(n) tokens/s and
  the server n/step_s(n) in total. a and b come from two anchors: one stream alone decodes at
  `single_stream_tps`, and `streams_ref` streams together at `total_tps_ref`.
  n is read again at every token, so a stream slows down as others join and speeds up as
  they finish.

Defaults (DESIGN §1c, Qwen3.6-27B-FP8 on one RTX Pro 6000): 570 generated tokens/s in total
at 28 streams (a competitor's measurement, vLLM stable, 99% prefix-cache hits); one stream
alone at 40 tokens/s (an assumption: reading ~27 GB of FP8 weights per step on a 1.8 TB/s
card allows at most ~65; nobody has measured it for us); prefill 4,000 tokens/s ("a few
thousand"); 0.05 s of scheduling before the first token. So step_s(n) = 24.1 ms + 0.89 ms·n:
~20 tokens/s per stream at 28 streams, and an 800-token reply (the Duck's mean) takes ~40 s.
`speed` divides every time (tests run the same model 20x faster).

Streams are paced token by token (`chunk_tokens` per SSE chunk, 1 like vLLM's default
stream interval), so the client parses as many chunks as it would from vLLM.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class LatencyModel:
    single_stream_tps: float = 40.0
    total_tps_ref: float = 570.0
    streams_ref: int = 28
    prefill_tps: float = 4000.0
    ttft_base_s: float = 0.05
    max_num_seqs: int = 32
    kv_tokens: int | None = None
    chunk_tokens: int = 1
    speed: float = 1.0

    def __post_init__(self) -> None:
        if self.single_stream_tps <= 0 or self.total_tps_ref <= 0 or self.prefill_tps <= 0 or self.speed <= 0:
            raise ValueError("latency model: rates and speed must be positive")
        if self.streams_ref < 2 or self.total_tps_ref / self.streams_ref >= self.single_stream_tps:
            raise ValueError("latency model: a stream must be slower when more streams share the GPU "
                             "(streams_ref >= 2 and total_tps_ref / streams_ref < single_stream_tps)")

    @property
    def a(self) -> float:
        """The fixed part of one decode step (seconds)."""
        return 1 / self.single_stream_tps - self.b

    @property
    def b(self) -> float:
        """What each stream in the batch adds to a decode step (seconds)."""
        return (self.streams_ref / self.total_tps_ref - 1 / self.single_stream_tps) / (self.streams_ref - 1)

    def step_s(self, streams: int) -> float:
        return self.a + self.b * max(1, streams)

    def stream_tps(self, streams: int) -> float:
        """Tokens per second one stream gets while `streams` decode together."""
        return 1 / self.step_s(streams)

    def total_tps(self, streams: int) -> float:
        return max(1, streams) * self.stream_tps(streams)

    def describe(self) -> dict[str, Any]:
        return asdict(self) | {"step_s": f"{self.a * 1000:.1f} ms + {self.b * 1000:.2f} ms x streams",
                               "stream_tps_at_ref": round(self.stream_tps(self.streams_ref), 2)}

    @classmethod
    def parse(cls, spec: str) -> "LatencyModel":
        """`"default"` or `"speed=20,kv_tokens=178000"` (fields of this class)."""
        kwargs: dict[str, Any] = {}
        for part in (p.strip() for p in spec.split(",")):
            if not part or part == "default":
                continue
            key, _, value = part.partition("=")
            if key not in cls.__dataclass_fields__ or not value:
                raise ValueError(f"latency model: unknown or empty setting {part!r} "
                                 f"(settings: {', '.join(cls.__dataclass_fields__)})")
            kwargs[key] = None if value == "none" else (int(value) if key in ("streams_ref", "max_num_seqs",
                                                                               "kv_tokens", "chunk_tokens")
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
