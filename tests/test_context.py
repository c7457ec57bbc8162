"""Context: prefix stability, block eviction with a summary, budgets from reported usage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from duck.agent.context import Context, ContextFull, compress_actions, estimate_tokens, summary_text
from duck.agent.turn import render, system_prompt
from duck.config import load_config
from duck.paths import SHARED


def _turn(ctx: Context, i: int, size: int = 2000, actions=("UP",), level: int = 1) -> None:
    ctx.begin_turn({"role": "user", "content": f"turn {i} " + "u" * size}, index=i, level=level,
                   actions_before=i)
    ctx.add({"role": "assistant", "content": "x" * size, "reasoning": "r", "reasoning_content": "r",
             "tool_calls": [{"id": f"c{i}", "type": "function",
                             "function": {"name": "python", "arguments": '{"code": "action(\'UP\')"}'}}]})
    ctx.add({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
    ctx.current.actions = list(actions)
    ctx.current.outcome = "board changed"


def _is_prefix(a: list, b: list) -> bool:
    return len(a) <= len(b) and all(x is y for x, y in zip(a, b))


def test_history_only_grows_at_its_end_until_an_eviction():
    ctx = Context("system prompt", budget=100_000, reserve=4000)
    prev = ctx.messages()
    for i in range(20):
        _turn(ctx, i)
        assert not ctx.fit()
        now = ctx.messages()
        assert _is_prefix(prev, now)  # the same objects, never rewritten
        prev = now
    assert ctx.evictions == 0


def test_eviction_drops_a_large_block_once_and_inserts_a_summary():
    ctx = Context("system prompt", budget=20_000, reserve=2000, evict_to=0.5)
    evicted_at = []
    prev = ctx.messages()
    for i in range(60):
        _turn(ctx, i, actions=["UP", "UP", "LEFT"])
        if ctx.fit():
            evicted_at.append(i)
            now = ctx.messages()
            assert now[0] is prev[0]  # the system prompt stays
            assert now[1]["role"] == "user" and "Earlier turns" in now[1]["content"]
            assert ctx.estimate() <= 0.5 * 20_000
        else:
            assert _is_prefix(prev, ctx.messages())
        prev = ctx.messages()
    assert 2 <= len(evicted_at) <= 8  # each eviction frees about half the budget
    gaps = np.diff(evicted_at)
    assert gaps.min() >= 3  # never one turn at a time
    assert "UP x2, LEFT" in ctx.summary["content"]


def test_budget_uses_the_servers_reported_usage():
    ctx = Context("s" * 340, budget=10_000, reserve=1000)
    ctx.begin_turn({"role": "user", "content": "u" * 340}, index=0, level=1, actions_before=0)
    sent = len(ctx.messages())
    ctx.add({"role": "assistant", "content": "a" * 34})
    ctx.observe(sent, prompt_tokens=1000, completion_tokens=50)  # the server counts 4x our guess
    assert ctx.ratio == pytest.approx(1000 / (2 * (100 + 5)), rel=0.01)
    assert ctx.estimate() == 1050  # exactly what the server said, nothing appended since
    ctx.add({"role": "tool", "content": "t" * 340})
    assert ctx.estimate() == pytest.approx(1050 + ctx.ratio * 105, abs=2)


def test_a_turn_that_alone_outgrows_the_budget_raises():
    ctx = Context("s", budget=3000, reserve=500)
    _turn(ctx, 0, size=20_000)
    with pytest.raises(ContextFull):
        ctx.fit()
    dropped = ctx.drop_current()
    assert dropped.index == 0 and ctx.turns == [] and "Earlier turns" in ctx.summary["content"]


def test_summary_lists_levels_actions_and_outcomes():
    ctx = Context("s", budget=10, reserve=0)
    _turn(ctx, 0, actions=["UP", "UP"], level=1)
    _turn(ctx, 1, actions=["MOUSE(row=3, col=4)"], level=2)
    items = [dict(turn=t.index, level=t.level, actions_before=0, actions=t.actions, outcome="level completed",
                  notes="Plan: go") for t in ctx.turns]
    text = summary_text(ctx.turns, items)
    assert "Level 1: 1 turn, 2 actions (UP x2)" in text
    assert "Level 2: 1 turn, 1 action (MOUSE x1)" in text
    assert "turn 1, level 2: MOUSE(row=3, col=4) -> level completed" in text
    assert "Plan: go" in text


def test_estimates_count_text_reasoning_calls_and_images():
    base = estimate_tokens({"role": "user", "content": "x" * 340})
    assert base == pytest.approx(105, abs=1)
    img = {"role": "user", "content": [{"type": "text", "text": "x" * 340},
                                       {"type": "image_url", "image_url": {"url": "data:"}}]}
    assert estimate_tokens(img) > base + 50


def test_prompt_templates_are_strict():
    import jinja2
    with pytest.raises(jinja2.UndefinedError):
        render("system.j2")  # missing variables are an error, not an empty string
    cfg = load_config()
    plain = system_prompt(cfg)
    cfg.agent.world_model_tools = True
    tools = system_prompt(cfg)
    assert "python" in plain and "plan(step" not in plain
    # the world-model section adds the method and one example per tool (agent.world_model_tools)
    assert all(f"`{name}(" in tools for name in ("objects", "diff", "controlled", "check", "plan", "explore"))
    assert tools.startswith(plain)


def test_compress_actions():
    assert compress_actions(["UP", "UP", "UP", "LEFT", "UP"]) == "UP x3, LEFT, UP"


@pytest.mark.public
@pytest.mark.slow
def test_context_benchmark_runs_on_the_start_of_a_recorded_game(public, tmp_path, capsys):

    from duck.bench.context import main
    traces = SHARED / "duck-traces"
    if not (traces / "turns").is_dir():
        pytest.skip("duck-traces not present")
    assert main(["--traces", str(traces), "--games", str(public), "--game", "ft09", "--pass", "6",
                 "--turns", "8", "--budget", "8000", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["actions_identical"] and out["evictions"] >= 1 and out["prompt_tokens_max"] <= 8000
    assert 0 < out["prefix_share_mean"] <= 1 and out["harness_ms_median"] > 0
