"""Where a model-driven game's wall time went, from its record alone (the load bench, `duck doctor`).

Each `model` event of a record is written the moment the agent has a reply (duck.agent.loop:
after the reply is added to the context), with the request's `latency_s` as the client
measured it. So for call k, `arrived_k = t_k` and `sent_k = t_k - latency_s_k`, and:

* model time: the sum of the calls' latencies (queue, prefill, decode, the stream's transfer);
* harness time: everything else between the game's first request and its last reply (the
  model's code, the game's steps, recording, the next prompt; failed requests count here too);
* start-up: from the record being opened to the first request (making the game, the first
  prompt), reported apart: it is paid once per game, not per turn;
* a ready wait: `sent_{k+1} - arrived_k`, how long an arrived reply waits for the harness before
  this game's next request reaches the server: while it lasts the GPU has nothing from this game;
* harness share: harness time / (harness + model time).

`game_timing(record)` gives one game's figures; `summarize(records)` the run's.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from duck.play.record import Record


def calls(record: Record) -> list[dict[str, Any]]:
    """One row per model call: sent, arrived, latency, turn, tokens, tool calls."""
    out = []
    for e in record.events:
        d = e.get("data") or {}
        if e.get("kind") != "model" or "latency_s" not in d:
            continue
        out.append({"sent": e["t"] - d["latency_s"], "arrived": e["t"], "latency_s": d["latency_s"],
                    "first_token_s": d.get("first_token_s"), "turn": d.get("turn"),
                    "prompt_tokens": d.get("prompt_tokens"), "cached_tokens": d.get("cached_tokens"),
                    "completion_tokens": d.get("completion_tokens"), "tool_calls": d.get("tool_calls", 0),
                    "dropped": len(d.get("dropped_calls") or []), "cut": d.get("cut"),
                    "empty": d.get("empty_calls") or 0})
    return out


def game_timing(record: Record) -> dict[str, Any]:
    rows = calls(record)
    # (A model reply cut at the game's deadline is how every game ends here: not an error.)
    errors = [f"{e.get('kind')}: {e.get('message')}"[:300] for e in record.events
              if e.get("kind") in ("error", "fallback") or (e.get("kind") == "timeout"
                                                           and str(e.get("message")).startswith("kernel"))]
    if record.end and record.end.get("reason") == "error":
        errors.append(f"end: {record.end.get('reason')}")
    if not rows:
        return {"calls": 0, "turns": 0, "actions": len(record.actions), "model_s": 0.0, "harness_s": 0.0, "start_s": None,
                "harness_share": None, "ready_waits": [], "latencies": [], "errors": errors,
                "completion_tokens": 0, "prompt_tokens": 0, "cached_tokens": 0, "tool_call_failures": 0}
    window = rows[-1]["arrived"] - rows[0]["sent"]
    model = sum(r["latency_s"] for r in rows)
    waits = [max(0.0, b["sent"] - a["arrived"]) for a, b in zip(rows, rows[1:])]
    return {"calls": len(rows), "turns": len({r["turn"] for r in rows}), "actions": len(record.actions),
            "start_s": max(0.0, rows[0]["sent"]),
            "model_s": model, "harness_s": max(0.0, window - model),
            "harness_share": max(0.0, window - model) / window if window > 0 else None,
            "ready_waits": waits, "latencies": [r["latency_s"] for r in rows], "errors": errors,
            "completion_tokens": sum(r["completion_tokens"] or 0 for r in rows),
            "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in rows),
            "cached_tokens": sum(r["cached_tokens"] or 0 for r in rows),
            # A reply the loop could not run as a tool call: none, one the client dropped, or
            # one with empty arguments (`{}`: a streaming parser lost them, vllm#31501); not
            # the last reply when the game's deadline cut it: that is how play ends.
            "tool_call_failures": sum(1 for i, r in enumerate(rows)
                                      if (r["tool_calls"] == 0 or r["dropped"] or r.get("empty"))
                                      and not (i == len(rows) - 1 and r["cut"] == "timeout")),
            "cut_at_end": rows[-1]["cut"] == "timeout"}


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarize(records: Iterable[Record]) -> dict[str, Any]:
    """The run's figures: per-game minimum and median of actions and turns, the harness share
    over all games' time, the ready waits, the model latencies and the tool-call failures."""
    games = {r.path.stem if r.path else r.game_id: game_timing(r) for r in records}
    g = list(games.values())
    model = sum(x["model_s"] for x in g)
    harness = sum(x["harness_s"] for x in g)
    waits = [w for x in g for w in x["ready_waits"]]
    lat = [v for x in g for v in x["latencies"]]
    n_calls = sum(x["calls"] for x in g)
    shares = [x["harness_share"] for x in g if x["harness_share"] is not None]
    starts = [x["start_s"] for x in g if x["start_s"] is not None]
    return {
        "games": len(g),
        "actions_per_game": {"min": min((x["actions"] for x in g), default=0),
                             "median": statistics.median([x["actions"] for x in g]) if g else 0},
        "turns_per_game": {"min": min((x["turns"] for x in g), default=0),
                           "median": statistics.median([x["turns"] for x in g]) if g else 0},
        "harness_share": round(harness / (harness + model), 4) if harness + model > 0 else None,
        "harness_share_max_game": round(max(shares), 4) if shares else None,
        "max_ready_wait_s": round(max(waits), 3) if waits else None,
        "ready_wait_s": {"median": _r(_q(waits, 0.5)), "p95": _r(_q(waits, 0.95))},
        "start_s": {"median": _r(_q(starts, 0.5)), "max": _r(max(starts, default=None))},
        "calls": n_calls,
        "model_latency_s": {"median": _r(_q(lat, 0.5)), "p90": _r(_q(lat, 0.9))},
        "tool_call_failure_rate": (round(sum(x["tool_call_failures"] for x in g)
                                         / max(1, n_calls - sum(bool(x.get("cut_at_end")) for x in g)), 4)
                                   if n_calls else None),
        "completion_tokens": sum(x["completion_tokens"] for x in g),
        "prompt_tokens": sum(x["prompt_tokens"] for x in g),
        "cached_tokens": sum(x["cached_tokens"] for x in g),
        "errors": sum(len(x["errors"]) for x in g),
        "error_messages": [f"{k}: {e}" for k, x in games.items() for e in x["errors"]][:10],
        "per_game": {k: {"actions": x["actions"], "turns": x["turns"], "calls": x["calls"],
                         "harness_share": _r(x["harness_share"], 4),
                         "max_ready_wait_s": _r(max(x["ready_waits"], default=None))} for k, x in games.items()},
    }


def _r(v: float | None, n: int = 3) -> float | None:
    return None if v is None else round(v, n)
