"""The stub server's `/metrics`: Prometheus text with the metric names vLLM serves.

The names and labels are vLLM's own, the same in 0.19.0 and 0.33.0 (vllm/v1/metrics/loggers.py,
PrometheusStatLogger; vllm/v1/spec_decode/metrics.py; prometheus_client adds `_total` to
counters), so what reads a real server's metrics (duck.llm.metrics, `duck doctor`) reads the
stub's the same way: the prefix cache's queries and hits (the stub's per-conversation cache
emulation), tokens and requests, the KV cache's usage (from the latency model's engine when
there is one) and capacity, and with MTP emulated (`spec`) the speculative-decoding counters.
Each name: docs/workbench.md, "The stub server".
"""

from __future__ import annotations

import threading
from typing import Any

import duck.config.profiles as profiles

BLOCK_SIZE = 16  # vLLM's default KV block size
# The KV cache the stub reports when it is given none: the default serving profile's pool
# (duck.config.profiles: Flash-Next, FP8 KV, 0.96 of the RTX Pro 6000's memory), in whole blocks.
DEFAULT_KV_TOKENS = profiles.plan(profiles.DEFAULT_PROFILE).kv_tokens // BLOCK_SIZE * BLOCK_SIZE


class Metrics:
    def __init__(self, model_name: str, kv_tokens: int | None = None,
                 spec: tuple[int, float] | None = None) -> None:
        self.model_name = model_name
        self.kv_tokens = kv_tokens or DEFAULT_KV_TOKENS
        self.spec = spec  # (drafted tokens a step, tokens a step yields) when MTP is emulated
        self.lock = threading.Lock()
        self.counters = {"prefix_cache_queries": 0, "prefix_cache_hits": 0, "prompt_tokens": 0,
                         "generation_tokens": 0, "spec_decode_num_drafts": 0, "spec_decode_num_draft_tokens": 0,
                         "spec_decode_num_accepted_tokens": 0}
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0}
        self.in_flight = 0

    def prompt(self, tokens: int, cached: int) -> None:
        with self.lock:
            self.counters["prefix_cache_queries"] += tokens
            self.counters["prefix_cache_hits"] += cached
            self.counters["prompt_tokens"] += tokens

    def generated(self, tokens: int, finish_reason: str) -> None:
        with self.lock:
            self.counters["generation_tokens"] += tokens
            if self.spec:
                drafted, per_step = self.spec
                steps = max(1, round(tokens / per_step)) if tokens else 0
                self.counters["spec_decode_num_drafts"] += steps
                self.counters["spec_decode_num_draft_tokens"] += steps * drafted
                self.counters["spec_decode_num_accepted_tokens"] += max(0, tokens - steps)
            # (vLLM's FinishReason: stop, length, abort; a tool call finishes with "stop")
            key = "length" if finish_reason == "length" else "stop"
            self.finished[key] += 1

    def text(self, engine: dict[str, Any] | None = None) -> str:
        labels = f'engine="0",model_name="{self.model_name}"'
        with self.lock:
            counters, finished, in_flight = dict(self.counters), dict(self.finished), self.in_flight
        running = engine["running"] if engine else in_flight
        waiting = engine["waiting"] if engine else 0
        usage = engine["kv_usage"] if engine else 0.0
        out = []

        def metric(name: str, kind: str, doc: str, rows: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}")
            out.extend(f"{name}{{{lab}}} {float(v)}" for lab, v in rows)

        metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
               [(labels, running)])
        metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               [(labels, waiting)])
        metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
               [(labels, usage)])
        docs = {"prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
                "prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
                "prompt_tokens": "Number of prefill tokens processed.",
                "generation_tokens": "Number of generation tokens processed."}
        if self.spec:
            docs |= {"spec_decode_num_drafts": "Number of spec decoding drafts.",
                     "spec_decode_num_draft_tokens": "Number of draft tokens.",
                     "spec_decode_num_accepted_tokens": "Number of accepted tokens."}
        for key, doc in docs.items():
            metric(f"vllm:{key}_total", "counter", doc, [(labels, counters[key])])
        metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
               [(f'engine="0",finished_reason="{r}",model_name="{self.model_name}"', n) for r, n in finished.items()])
        blocks = self.kv_tokens // BLOCK_SIZE
        metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
               [(f'block_size="{BLOCK_SIZE}",enable_prefix_caching="True",engine="0",'
                 f'num_gpu_blocks="{blocks}"', 1)])
        return "\n".join(out) + "\n"
