"""What the context benchmark measures per request, and its long synthetic game.

`MeasuringServer` is the stub server keeping, per request: the prompt tokens, the tokens its
cache holds (the longest prefix shared with the previous prompt plus the reply generated for
it), the prefix share (against the previous prompt alone), and the **re-prefilled** tokens:
tokens the cache held before but that must be computed again (of the part of the prompt before
its new messages, what lies beyond the cached prefix). A request that only appends costs none;
the first after a trim re-prefills everything kept after the system prompt. "New" messages are
those after the last one the previous request held or the reply it generated (matched by
content, tool-call ids and the end of the reasoning, so a reply sent back with its thinking
cut still counts as the same message).

`synthetic_game` plays a long game through the real `Context`, `ModelClient` and the stub,
without a game or a kernel, at the field's per-turn sizes (docs/workbench.md lists them) for
`hours` of play at the field's ~70 generated tokens per second per stream.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from typing import Any

import numpy as np

from devkit.stub.models import FixedModel
from devkit.stub.tokenizer import image_token_list, suffix_tokens
from devkit.stub.server import StubServer

_PROBE = {"role": "user", "content": "."}
_PROBE_TEXT = "<|im_start|>user\n.<|im_end|>\n"
TOKENS_PER_S = 70.0  # generated tokens per second per stream, Flash-Next at 10 streams (FIELD §4)


def _key(m: dict[str, Any]) -> str:
    if m.get("role") == "assistant":
        ids = [c.get("id") for c in m.get("tool_calls") or []]
        return json.dumps(["assistant", m.get("content") or "", ids, (m.get("reasoning") or "")[-200:]])
    return json.dumps(m, sort_keys=True)


class MeasuringServer(StubServer):
    """The stub server, keeping `rows` (one per request; see the module docstring)."""

    def __init__(self, model: Any, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.rows: list[dict[str, Any]] = []
        self._held: dict[str, set[str]] = {}  # conversation → keys of the previous request + its reply
        self._prev_keys: dict[str, list[str]] = {}

    def account(self, conversation: str, body: dict[str, Any], prompt: tuple[str, int] | None = None
                ) -> tuple[int, int]:
        text, tokens = prompt or self.prompt(body)
        prev_full = self._full.get(conversation) or self._last.get(conversation)
        tokens, cached = super().account(conversation, body, (text, tokens))
        messages = body.get("messages") or []
        keys = [_key(m) for m in messages]
        held = self._held.get(conversation, set())
        old = [i for i, k in enumerate(keys) if k in held]
        reprefill = 0
        held_all = prev_full is not None and text.startswith(prev_full)  # (then nothing old is recomputed)
        if old and prev_full is not None and not held_all:
            # (a probe user message keeps the template's "user query" check happy; its text is cut off)
            start, _ = self.prompt(dict(body, messages=messages[:old[-1] + 1] + [_PROBE]), generation=False)
            images = image_token_list(messages)
            before_new = tokens - suffix_tokens(text, len(start) - len(_PROBE_TEXT), images)  # up to the new messages
            reprefill = max(0, before_new - cached)
        prev = self._prev_keys.get(conversation)
        changed = prev is not None and keys[:len(prev)] != prev
        self._prev_keys[conversation] = keys
        self._held[conversation] = set(keys)
        r = self.requests[-1]
        self.rows.append({"conversation": conversation, "prompt_tokens": tokens, "cached_tokens": cached,
                          "prefix_share": r["prefix_share"], "cache_share": r["cache_share"],
                          "reprefill_tokens": reprefill, "prefix_changed": changed})
        return tokens, cached

    def generated(self, conversation: str, body: dict[str, Any], message: dict[str, Any]) -> None:
        super().generated(conversation, body, message)
        self._held.setdefault(conversation, set()).add(_key(message))


def summarise_rows(rows: list[dict[str, Any]], trims: int) -> dict[str, Any]:
    """Per-request rows of one game (or several) → the benchmark's numbers."""
    shares = [r["prefix_share"] for r in rows if r["prefix_share"] is not None]
    cache = [r["cache_share"] for r in rows if r["cache_share"] is not None]
    prompt = sum(r["prompt_tokens"] for r in rows)
    at_change = sum(r["reprefill_tokens"] for r in rows if r["prefix_changed"])
    return {"requests": len(rows),
            "prompt_tokens_max": max((r["prompt_tokens"] for r in rows), default=0),
            "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] for r in rows)) if rows else 0,
            "prefix_share_mean": round(statistics.mean(shares), 4) if shares else None,
            "cache_share_mean": round(statistics.mean(cache), 4) if cache else None,
            "cached_token_share": round(sum(r["cached_tokens"] for r in rows) / prompt, 4) if prompt else None,
            "prefill_tokens": sum(r["prompt_tokens"] - r["cached_tokens"] for r in rows),
            "reprefill_tokens": sum(r["reprefill_tokens"] for r in rows),
            "reprefill_tokens_at_trims": at_change,
            "reprefill_tokens_per_trim": round(at_change / trims) if trims else None}


# ---------------------------------------------------------------------------------------
# The long synthetic game

_WORDS = ("the red block moves left when I press it so the goal might be the blue cell at the top "
          "and walls stop it but the door opened after two moves which suggests a key").split()


def _english(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


def synthetic_replies(seed: int, calls: int, chars_per_token: float = 3.6) -> list[Any]:
    """The model's side: `calls` replies, each drawn from its own seed (the same k-th reply
    whatever the context did before), sized when asked: a reply longer than the request's
    max_tokens is cut there (finish_reason `length`, no tool call)."""
    def reply(k: int) -> Any:
        rng = random.Random(seed * 1_000_003 + k)
        thinking = int(rng.lognormvariate(math.log(1000), 0.6))  # tokens; median 1,000, mean ~1,200
        if rng.random() < 0.03:
            thinking = 10 ** 6  # runs into the output cap
        code = f"r = action(['LEFT'])  # step {k}\n" + "\n".join(
            f"print(current_frame.segmentation['nodes'][{i}])" for i in range(rng.randint(3, 20)))

        def answer(request: dict[str, Any]) -> dict[str, Any]:
            cap = int(request.get("max_tokens") or 12288)
            if thinking >= cap:
                return {"reasoning": _english(rng, int(cap * chars_per_token)), "content": "",
                        "finish_reason": "length", "completion_tokens": cap}
            return {"reasoning": _english(rng, int(thinking * chars_per_token)), "content": f"Plan {k}.",
                    "code": code}
        return answer
    return [reply(k) for k in range(calls)]


def synthetic_game(cfg: Any, hours: float, seed: int = 0) -> dict[str, Any]:
    """Play `hours` of synthetic turns through Context + ModelClient + MeasuringServer with
    config `cfg` (the budget, low water, cut thinking). The system
    prompt, the tool and the correction of a reply without a call are made by the agent's
    own functions (duck.agent.turn, duck.agent.loop), never a copy. Returns the numbers of
    `summarise_rows` plus trims, turns and the harness time per turn."""
    from duck.agent.context import Context, ContextFull
    from duck.agent.loop import Correction, tool_calls
    from duck.agent.turn import image_part, python_tool, render, system_prompt
    from duck.game.frames import grid_png
    from duck.llm.client import ModelClient

    npr = np.random.default_rng(seed)
    seconds_per_call = 1200 / TOKENS_PER_S + 1.0  # ~18 s: decode of a mean reply, prefill and harness
    calls = max(1, int(hours * 3600 / seconds_per_call))
    server = MeasuringServer(FixedModel(synthetic_replies(seed, calls)))
    tools = python_tool()
    a = cfg.agent
    harness: list[float] = []
    with server as url:
        client = ModelClient(url, cfg.model, session="synthetic:0")
        ctx = Context(system_prompt(cfg), a.context_tokens, cfg.model.max_output_tokens, evict_to=a.evict_to,
                      counter=client.counter(tools))
        board = npr.integers(0, 16, (64, 64)).astype(np.int8) // 4  # a few colours, as boards have
        made, turn = 0, 0
        while made < calls:
            rng = random.Random(seed * 1_000_003 + 500_000 + turn)  # the turn's own draws
            t0 = time.perf_counter()
            board[npr.integers(0, 64), :] = npr.integers(0, 4)  # the move changed a row
            diff = np.where(npr.random((64, 64)) < 0.02, board, 0).astype(np.int8)
            ctx.begin_turn({"role": "user", "content": [
                {"type": "text", "text": f"Turn {turn}. Level 2, 37 actions on it. The last call played LEFT: "
                                         f"the board changed. " + _english(rng, 400)},
                image_part(grid_png(board, 10)), image_part(grid_png(diff, 10))]},
                index=turn, level=2, actions_before=turn)
            model_s = 0.0
            for _ in range(1 if rng.random() < 0.55 else rng.randint(2, 3)):
                if made >= calls:
                    break
                try:
                    ctx.fit()
                except ContextFull:
                    ctx.drop_current()
                    break
                messages = ctx.messages()
                m0 = time.perf_counter()
                r = client.chat(messages, tools, seed=made)
                model_s += time.perf_counter() - m0
                made += 1
                marker = render("thinking_cut.j2", cut=r.cut, dropped=r.thinking_dropped) if r.thinking_dropped else ""
                ctx.add(r.message(marker))
                ctx.observe(len(messages), r.prompt_tokens, r.completion_tokens)
                try:
                    call_id = tool_calls(r)[0][0]
                    ctx.add({"role": "tool", "tool_call_id": call_id,
                             "content": "\n".join(f"Node {i}: color=p, pixels={i % 7}, boundary=[[{i}, {2 * i}]]"
                                                  for i in range(rng.randint(10, 40)))})
                except Correction as c:  # a reply cut at the output cap: the loop's corrective
                    ctx.add({"role": "user", "content": c.message})
            harness.append(time.perf_counter() - t0 - model_s)
            turn += 1
    out = summarise_rows(server.rows, len(ctx.trims))
    return {"budget_tokens": a.context_tokens, "hours": hours, "calls": made, "turns": turn,
            "trims": len(ctx.trims), "turns_dropped_as_too_long": ctx.evictions - len(ctx.trims),
            "calls_per_trim": round(made / len(ctx.trims), 1) if ctx.trims else None,
            **out, "harness_ms_per_turn_median": round(1000 * statistics.median(harness), 2),
            "estimator": ctx.counter.estimator.rates()}
