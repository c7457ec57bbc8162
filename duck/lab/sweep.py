"""`duck doctor --sweep`: the first-GPU sweep whose output sets the serving profile's defaults.

On the RTX Pro 6000 (or any GPU with the profile's weights), within 30 minutes: vLLM is
booted once with MTP on and once with it off (speculative decoding is a server flag), each
time with room for the largest point (`--max-num-seqs` = the most slots + 1, `--max-model-len`
= the longest context), and on each server every point of `POINTS` (slots x context per
game) is played for `minutes` by that many games at once, through the doctor's own `play`
(the scheduler's runner, the agent, the kernel). Per point: the doctor's figures and its
checks (duck.lab.doctor.checks: decode against the field's 169 · n^0.6 scaled from 600 at 10,
prefix-cache hit >= 0.9, tool-call failures, the boot); `best` is the passing point with
the most decode tokens per second in total, and `set` the config fields that make it the
default (`scheduler.slots`, `agent.context_tokens`, `model.serve.max_model_len`,
`model.serve.mtp_tokens`): put them into the profile (duck.profiles) and, if the measured KV
pool (`kv_cache_tokens`) differs from the plan's, the profile's `overhead_gib` with it.

Time: two boots (~9-10 min each for Flash-Next, FIELD §4) and 2 x 3 points x `minutes`
(1.5 by default): ~29 min. A point's contexts only grow as far as its minutes let them;
the pool at full contexts is the plan's, checked against the measured pool.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from duck.config import with_values
from duck.game.gateway import free_port
from duck.lab import operating as dr

POINTS = ((10, 131072), (12, 98304), (16, 71680))  # Franzen's 10 x 128K, between, Siriki's 16 x 70K
MTP = (3, 0)
BUDGET_S = 30 * 60


def sweep(cfg: Any, out: Path, games: Path, only: list[str] | None, minutes: float,
          limits: dict[str, float] | None = None) -> dict[str, Any]:
    from duck.llm.serve import VLLMServer
    out.mkdir(parents=True, exist_ok=True)
    limits = {**dr.LIMITS, **(limits or {})}
    t0 = time.monotonic()
    most, longest = max(n for n, _ in POINTS), max(c for _, c in POINTS)
    rows: list[dict[str, Any]] = []
    for mtp in MTP:
        scfg = with_values(cfg, {"model.serve.mtp_tokens": mtp, "model.serve.max_num_seqs": most + 1,
                                 "model.serve.max_model_len": longest, "scheduler.slots": most,
                                 "agent.context_tokens": min(longest, cfg.agent.context_tokens)})
        server = VLLMServer(scfg.model, port=free_port(), log_path=out / f"vllm-mtp{mtp}.log")
        try:
            boot = round(server.start().wait_ready(), 1)
        except Exception as e:  # a boot that fails is a finding for every point of it
            rows += [{"mtp_tokens": mtp, "slots": n, "context_tokens": c, "error": f"{type(e).__name__}: {e}"[:1000]}
                     for n, c in POINTS]
            server.stop()
            continue
        try:
            for n, ctx in POINTS:
                if time.monotonic() - t0 > BUDGET_S:
                    rows.append({"mtp_tokens": mtp, "slots": n, "context_tokens": ctx, "error": "out of the 30 min"})
                    continue
                pcfg = with_values(scfg, {"scheduler.slots": n, "agent.context_tokens": ctx})
                p = dr.play(pcfg, server.url, games, only, minutes * 60, out / f"mtp{mtp}-{n}x{ctx}", n=n)
                figures = {"boot_s": boot, **{k: p.get(k) for k in (
                    "decode_tokens_per_s", "decode_tokens_per_s_per_stream", "prefix_cache_hit_rate",
                    "tool_call_failure_rate", "empty_tool_calls", "mtp", "median_model_latency_s")},
                    "kv_cache_tokens": (p.get("metrics_after") or {}).get("kv_cache_tokens")}
                verdicts = dr.checks(figures, n, limits)
                rows.append({"mtp_tokens": mtp, "slots": n, "context_tokens": ctx, "figures": figures,
                             "checks": verdicts, "ok": p.get("ok") and all(c["ok"] for c in verdicts.values())})
        finally:
            server.stop()
    passing = [r for r in rows if r.get("ok")]
    best = max(passing, key=lambda r: r["figures"]["decode_tokens_per_s"] or 0, default=None)
    doc = {"points": rows, "minutes_per_point": minutes, "wall_s": round(time.monotonic() - t0, 1),
           "plan_kv_tokens": cfg.plan.kv_tokens, "profile": cfg.plan.profile,
           "best": None if best is None else {k: best[k] for k in ("slots", "context_tokens", "mtp_tokens")},
           "set": None if best is None else [f"scheduler.slots={best['slots']}",
                                             f"agent.context_tokens={best['context_tokens']}",
                                             f"model.serve.max_model_len={best['context_tokens']}",
                                             f"model.serve.mtp_tokens={best['mtp_tokens']}"]}
    (out / "sweep.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc
