"""What `duck doctor` and its sweep measure on a GPU machine: games played at once by the model,
the figures of that play, and the field's operating points they are checked against.

`play(cfg, url, games, ...)`: `n` games at once through the scheduler's runner, the agent (no
fallback) and the kernel, with the figures from the server's `/metrics` (duck.llm.metrics)
and the records (devkit.doctor.turns). `checks(figures, streams, limits)`: each figure against
`LIMITS` (FIELD §4, the RTX Pro 6000 running Flash-Next): decode >= 600 tokens/s in total at
10 streams (scaled as the field's 169 · n^0.6 at another count), prefix-cache hit rate >= 0.9,
boot <= 12 min, tool-call failures (no call, a dropped one, or `{}`) <= 2%, and where the
server drafts MTP tokens (`figures["mtp_drafted"]`), at least 1.5 tokens accepted per engine
step (FIELD §4: 2.6-2.9 of 4; ~1.5 is what an untrained draft head gave, FIELD §5).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from duck.files import fresh_run
from duck.game.source import GameSource
from duck.llm import metrics as vllm_metrics
from devkit.doctor.turns import calls, summarize
from duck.play.record import read_record


def play(cfg: Any, url: str, games: Path, only: list[str] | None, seconds: float, out: Path,
         n: int = 3) -> dict[str, Any]:
    """`n` games at once through the scheduler's runner, the agent (no fallback) and the
    kernel; fewer games than `n` are repeated (a repeat is a conversation of its own)."""
    # (Here, not at the top: the policies bring the model client, which `duck --help` needs not.)
    from devkit.bench.load import Repeats, copy_index, game_list
    from duck.policies import make_policy
    from scheduler.policy import make_policy as make_schedule
    from scheduler.runner import run_schedule
    source = Repeats(GameSource.offline(games))
    ids = game_list(source.source, n, only)
    records = fresh_run(out)
    before = vllm_metrics.fetch(url)
    t0 = time.monotonic()
    run_schedule(make_schedule("fixed", cfg.scheduler), ids, slots=len(ids), budget_s=seconds, source=source,
                 play_policy=lambda g: make_policy("llm", cfg.play.seed, config=cfg, model_url=url,
                                                   pass_=copy_index(g)),
                 max_actions=cfg.play.max_actions, records_dir=records)
    wall = time.monotonic() - t0
    after = vllm_metrics.fetch(url)
    recs = [read_record(p) for p in sorted(records.glob("*.jsonl"))]
    s = summarize(recs)
    d = vllm_metrics.delta(before, after)
    rows = [c for r in recs for c in calls(r)]
    return {"ok": s["calls"] > 0 and all(x["actions"] > 0 for x in s["per_game"].values()),
            "games": {k: {kk: v[kk] for kk in ("actions", "turns", "calls")} for k, v in s["per_game"].items()},
            "wall_s": round(wall, 1), "calls": s["calls"], "errors": s["errors"],
            "error_messages": s["error_messages"], "metrics_delta": d, "metrics_after": after,
            **rates(d, wall, rows),
            "records_cache_hit_rate": round(s["cached_tokens"] / s["prompt_tokens"], 4) if s["prompt_tokens"] else None,
            "tool_call_failure_rate": s["tool_call_failure_rate"],
            "empty_tool_calls": sum(c.get("empty") or 0 for c in rows), "streams": len(ids),
            "median_model_latency_s": s["model_latency_s"]["median"],
            "harness_share": s["harness_share"], "max_ready_wait_s": s["max_ready_wait_s"]}


def rates(d: dict[str, Any], wall: float, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The server's figures over `wall` seconds from its /metrics delta `d` (decode tokens/s, the
    prefix-cache hit rate, MTP's acceptance) and the median decode tokens/s of one stream over
    `calls` (each with `completion_tokens`, `latency_s`, `first_token_s`)."""
    per_stream = [c["completion_tokens"] / (c["latency_s"] - c["first_token_s"]) for c in calls
                  if c["completion_tokens"] and c["first_token_s"] is not None and c["latency_s"] > c["first_token_s"]]
    return {"decode_tokens_per_s": round(d["generation_tokens"] / wall, 1) if d.get("generation_tokens") else None,
            "decode_tokens_per_s_per_stream": round(statistics.median(per_stream), 1) if per_stream else None,
            "prefix_cache_hit_rate": (round(d["prefix_cache_hits"] / d["prefix_cache_queries"], 4)
                                      if d.get("prefix_cache_queries") else None),
            "mtp": vllm_metrics.mtp(d)}


FIGURES = ("decode_tokens_per_s", "decode_tokens_per_s_per_stream", "prefix_cache_hit_rate", "tool_call_failure_rate",
           "empty_tool_calls", "mtp", "median_model_latency_s")


def figures(p: dict[str, Any], boot_s: float | None, mtp_drafted: int) -> dict[str, Any]:
    """The figures `checks` reads, from a play's (or a soak's) result `p`."""
    return {"boot_s": boot_s, **{k: p.get(k) for k in FIGURES},
            "kv_cache_tokens": (p.get("metrics_after") or {}).get("kv_cache_tokens"), "mtp_drafted": mtp_drafted}


# The field's operating points (FIELD §4): what a ready GPU machine reaches.
LIMITS = {"min_decode_tps": 600.0, "min_prefix_hit": 0.9, "max_boot_s": 720.0, "max_tool_failures": 0.02,
          "min_mtp_tokens_per_step": 1.5}


def decode_limit(limit_at_10: float, streams: int) -> float:
    """The decode limit at `streams` streams: the field's 169 · n^0.6, scaled to the limit at 10."""
    return round(limit_at_10 * (max(1, streams) / 10) ** 0.6, 1)


def checks(figures: dict[str, Any], streams: int, limits: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each figure against its limit; a figure that was not measured fails its check (MTP's
    only where the server drafts: `figures["mtp_drafted"]`)."""
    def at_least(v: Any, lim: float) -> dict[str, Any]:
        return {"value": v, "limit": f">= {lim:g}", "ok": v is not None and v >= lim}

    def at_most(v: Any, lim: float) -> dict[str, Any]:
        return {"value": v, "limit": f"<= {lim:g}", "ok": v is not None and v <= lim}
    return {"decode_tokens_per_s": at_least(figures.get("decode_tokens_per_s"),
                                            decode_limit(limits["min_decode_tps"], streams)),
            "prefix_cache_hit_rate": at_least(figures.get("prefix_cache_hit_rate"), limits["min_prefix_hit"]),
            "boot_s": at_most(figures.get("boot_s"), limits["max_boot_s"]),
            "tool_call_failure_rate": at_most(figures.get("tool_call_failure_rate"), limits["max_tool_failures"]),
            **({"mtp_tokens_per_step": at_least((figures.get("mtp") or {}).get("tokens_per_step"),
                                                limits["min_mtp_tokens_per_step"])} if figures.get("mtp_drafted") else {})}


