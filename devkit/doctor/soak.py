"""`duck doctor --soak MINUTES`: the server under a run's load for long, MTP and prefix caching on.

Why: MTP with prefix caching on these hybrids crashed vLLM builds of August-September within ~20
minutes (vllm issue 54173; 0.33 carries neither fix), and an NVFP4 build's MTP acceptance fell to
~1.5 tokens a step (an untrained draft head): only a long run on the GPU tells. The load:
`streams` conversations at once through the real client (duck.llm.client), each shaped like a
Duck game (the agent's system prompt, then a Duck trace's turns, every request extending the
last; without the traces, board dumps and the stub player's reply sizes), a fresh conversation
near the context budget or the image limit. What it reports: docs/serving.md, "The soak".

The rule for the first submission (`start_rung`): rung 0 (as planned: MTP on) when the soak
with MTP on ran its whole time, the server never died, no request failed (an error or a
time-out: a wedge) and MTP accepted at least `min_tokens_per_step` (1.5) tokens a step;
otherwise rung 1 (MTP off: `model.serve.mtp_tokens=0`), with the reason. A profile without
MTP starts on rung 0 whatever the soak says of MTP.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from duck.agent.turn import image_part, python_tool, system_prompt
from duck.game.frames import grid_png
from devkit.doctor.operating import rates
from duck.llm import metrics as vllm_metrics
from duck.llm.client import ContextOverflow, ModelClient, ModelError
from duck.paths import SHARED

TRACES = SHARED / "duck-traces"
CHARS_PER_TOKEN = 3.0  # a reply's thinking, text and code (FIELD §3: English ~3.8, code ~2.4)
TOOL_OUTPUT = ("level 1 step {n}: 14 regions, 3 small, {c} cells changed; valid: ['UP', 'DOWN', 'LEFT', "
               "'RIGHT', 'MOUSE']\ncolours: [(0, 3112), (5, 641), (9, 212), (4, 96), (2, 25), (3, 10)]\n"
               "small: [(7, 4, 9, (12, 40)), (9, 2, 16, (30, 8)), (11, 3, 25, (50, 50))]")


def trace_games(traces: Path = TRACES, limit: int = 400) -> list[list[tuple[str, int]]]:
    """Per game of the traces: its turns, pass after pass (one pass is ~50 turns: their
    chain grows a conversation to the context budget, as a long game does), as (the turn
    prompt, the reply's tokens)."""
    games = []
    for path in sorted((traces / "turns").glob("*.jsonl.gz")):
        turns = []
        with gzip.open(path, "rt") as f:
            for line in f:
                t = json.loads(line)
                if not t.get("prompt_state"):
                    continue
                chars = int(t.get("reasoning_chars") or 0) + len(t.get("content") or "") + sum(
                    len(c.get("code") or "") for c in t.get("calls") or [] if isinstance(c, dict))
                turns.append((str(t["prompt_state"]), max(64, int(chars / CHARS_PER_TOKEN))))
                if len(turns) >= limit:
                    break
        if turns:
            games.append(turns)
    return games


def stub_games(n: int, turns: int = 40) -> list[list[tuple[str, int]]]:
    """Without the traces: board dumps as the turn prompts, reply sizes as the stub player
    draws them (lognormal, median 800 tokens)."""
    out = []
    for g in range(n):
        rng = np.random.default_rng(g)
        out.append([("Current state: step {}.\n".format(k) + "\n".join(
            "".join("0123456789abcdef"[v] for v in row) for row in rng.integers(0, 16, (64, 64))),
                     int(min(8000, max(64, 800 * np.exp(0.6 * rng.standard_normal()))))) for k in range(turns)])
    return out


class Tally:
    """What the streams measured, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.conversations = 0

    def call(self, stats: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append(stats)

    def error(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)


def _stream(k: int, client: ModelClient, system: dict[str, Any], turns: list[tuple[str, int]], budget: int,
            images_cap: int, stop: threading.Event, tally: Tally, output_cap: int) -> None:
    rng = np.random.default_rng(1000 + k)
    tools = python_tool()
    while not stop.is_set():
        msgs, images = [system], 0
        with tally.lock:
            tally.conversations += 1
        for n, (text, size) in enumerate(turns):
            if stop.is_set():
                return
            board = image_part(grid_png(rng.integers(0, 16, (64, 64)), 4))
            msgs.append({"role": "user", "content": [{"type": "text", "text": text}, board]})
            images += 1
            try:
                r = client.chat(msgs, tools, seed=k * 100_000 + n, max_tokens=min(size, output_cap))
            except ContextOverflow:
                break
            except ModelError as e:
                tally.error(f"{type(e).__name__}: {e}"[:300])
                break
            tally.call(r.stats())
            msgs.append(r.message())
            msgs += [{"role": "tool", "tool_call_id": c.id, "content": TOOL_OUTPUT.format(n=n, c=n * 7 % 50)}
                     for c in r.tool_calls]
            if (r.prompt_tokens or 0) + 2 * output_cap > budget or images >= images_cap:
                break  # the trim, in short: a new game from the shared system prompt


def soak(cfg: Any, url: str, minutes: float, out: Path, streams: int = 10,
         alive: Callable[[], bool] = lambda: True, traces: Path = TRACES) -> dict[str, Any]:
    """`streams` Duck-shaped conversations at once for `minutes` (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    games = trace_games(traces) if (traces / "turns").is_dir() else []
    source = "the Duck traces" if games else "the stub player's shapes"
    games = games or stub_games(streams)
    rng = random.Random(0)
    rng.shuffle(games)
    system = {"role": "system", "content": system_prompt(cfg)}
    budget, cap = cfg.agent.context_tokens, min(cfg.model.max_output_tokens, cfg.agent.context_tokens // 4)
    images_cap = cfg.model.serve.images_per_prompt
    tally, stop = Tally(), threading.Event()
    before = vllm_metrics.fetch(url)
    t0 = time.monotonic()
    threads = [threading.Thread(target=_stream, daemon=True, name=f"soak-{k}", args=(
        k, ModelClient(url, cfg.model, session=f"soak-{k}"), system, games[k % len(games)], budget, images_cap,
        stop, tally, cap)) for k in range(streams)]
    for t in threads:
        t.start()
    crashed = False
    while time.monotonic() - t0 < minutes * 60 and any(t.is_alive() for t in threads):
        if not alive():
            crashed = True
            break
        time.sleep(min(1.0, minutes * 6))
    stop.set()
    for t in threads:
        t.join(timeout=cfg.model.timeout_s + 5)
    wall = time.monotonic() - t0
    crashed = crashed or not alive()
    try:
        d = vllm_metrics.delta(before, vllm_metrics.fetch(url))
    except vllm_metrics.MetricsError as e:
        d, crashed = {}, True
        tally.error(str(e))
    return summarize(tally, d, wall, minutes, streams, crashed, source, out)


def summarize(tally: Tally, d: dict[str, Any], wall: float, minutes: float, streams: int, crashed: bool,
              source: str, out: Path) -> dict[str, Any]:
    calls = tally.calls
    failed_tools = sum(1 for c in calls if not c["tool_calls"] or c["dropped_calls"] or c["empty_calls"])
    doc = {"ok": not crashed and not tally.errors and bool(calls) and wall >= minutes * 60 * 0.95,
           "minutes": minutes, "wall_s": round(wall, 1), "streams": streams, "shapes": source,
           "requests": len(calls), "conversations": tally.conversations, "crashed": crashed,
           "errors": len(tally.errors), "error_messages": tally.errors[:5], "metrics_delta": d,
           **rates(d, wall, calls), "tool_call_failure_rate": round(failed_tools / len(calls), 4) if calls else None,
           "empty_tool_calls": sum(c["empty_calls"] for c in calls),
           "median_prompt_tokens": statistics.median([c["prompt_tokens"] or 0 for c in calls]) if calls else None,
           "max_prompt_tokens": max((c["prompt_tokens"] or 0 for c in calls), default=None),
           "median_model_latency_s": round(statistics.median([c["latency_s"] for c in calls]), 3) if calls else None}
    (out / "soak.json").write_text(json.dumps(doc | {"calls": calls}, indent=1, default=str))
    return doc


def start_rung(soaked: dict[str, Any], mtp_drafted: int, min_tokens_per_step: float) -> tuple[int, str]:
    """The first submission's rung from a soak (the rule in the module docstring)."""
    if not mtp_drafted:
        return 0, "the profile drafts no MTP tokens: rung 0 already serves without MTP"
    if soaked.get("crashed"):
        return 1, "the server died during the soak with MTP and prefix caching on"
    if soaked.get("errors"):
        return 1, f"{soaked['errors']} requests failed during the soak (errors or time-outs: a wedge)"
    if soaked.get("wall_s", 0) < soaked.get("minutes", 0) * 60 * 0.95 or not soaked.get("requests"):
        return 1, "the soak did not run its whole time"
    tps = (soaked.get("mtp") or {}).get("tokens_per_step")
    if tps is None or tps < min_tokens_per_step:
        return 1, f"MTP accepted {tps} tokens per step (< {min_tokens_per_step:g}: an untrained draft head?)"
    return 0, (f"{soaked['minutes']:g} min of {soaked['streams']} streams with MTP ({tps} tokens a step) and "
               "prefix caching on: no crash, no failed request")
