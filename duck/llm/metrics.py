"""Reading a vLLM server's `/metrics` (Prometheus text) for `duck doctor`.

The names are vLLM's, the same in 0.19.0 and the pinned 0.33.0 (vllm/v1/metrics/loggers.py;
prometheus_client adds `_total` to a counter's name): `vllm:prefix_cache_queries` and
`vllm:prefix_cache_hits`, `vllm:prompt_tokens`, `vllm:generation_tokens`,
`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, the info
gauge `vllm:cache_config_info` (the KV cache's capacity is `block_size` x `num_gpu_blocks`, or
`kv_cache_size_tokens` where 0.33 gives it: on a hybrid model the product can be wrong), and
the `vllm:spec_decode_*` counters (vllm/v1/spec_decode/metrics.py) that `mtp(delta)` reads.
tests/test_doctor.py checks these names against the pinned vLLM's source when its venv is here.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Any

COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens")
SPEC_COUNTERS = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
CACHE_INFO = "vllm:cache_config_info"

_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(RuntimeError):
    """The server has no readable /metrics."""


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def summary(text: str) -> dict[str, Any]:
    """The figures the doctor uses: counters summed over engines (and finish reasons), gauges,
    and the KV cache's capacity in tokens (None when the server does not say)."""
    samples = parse(text)
    out: dict[str, Any] = {}
    for key in COUNTERS + SPEC_COUNTERS:
        vals = [v for n, _, v in samples if n in (f"vllm:{key}_total", f"vllm:{key}")]
        out[key] = sum(vals) if vals else None
    for key in GAUGES:
        vals = [v for n, _, v in samples if n == f"vllm:{key}"]
        out[key] = sum(vals) if vals and key != "kv_cache_usage_perc" else (max(vals) if vals else None)
    capacity = None
    for n, labels, _ in samples:
        if n == CACHE_INFO and labels.get("kv_cache_size_tokens") not in (None, "", "None"):
            try:
                capacity = (capacity or 0) + int(labels["kv_cache_size_tokens"])
                continue
            except ValueError:
                pass
        if n == CACHE_INFO and labels.get("num_gpu_blocks") not in (None, "", "None"):
            try:
                capacity = (capacity or 0) + int(labels["num_gpu_blocks"]) * int(labels.get("block_size") or 16)
            except ValueError:
                pass
    out["kv_cache_tokens"] = capacity
    return out


def fetch(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """GET `{url}/metrics` and summarize it; raises MetricsError."""
    try:
        with urllib.request.urlopen(url.rstrip("/").removesuffix("/v1") + "/metrics", timeout=timeout) as r:
            return summary(r.read().decode("utf-8", "replace"))
    except (OSError, ValueError) as e:
        raise MetricsError(f"no metrics at {url}/metrics: {e}") from e


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Counter differences between two summaries (None where either lacks the counter)."""
    return {k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else None
            for k in COUNTERS + SPEC_COUNTERS}


def mtp(d: dict[str, Any]) -> dict[str, Any] | None:
    """From a counters' delta: `tokens_per_step` (1 + accepted / drafts: FIELD §4's "2.6-2.9
    of 4") and `acceptance` (accepted / drafted tokens); None without speculative decoding."""
    drafts, drafted, accepted = (d.get(k) for k in SPEC_COUNTERS)
    if not drafts:
        return None
    return {"drafts": drafts, "tokens_per_step": round(1 + (accepted or 0) / drafts, 3),
            "acceptance": round((accepted or 0) / drafted, 3) if drafted else None}
