"""Context: prefix stability, trims with hysteresis down to the low-water mark, never the current
turn and never a history the template rejects, the carried message, no summary, budgets from
the server's usage."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from duck.agent.context import Context, ContextFull
from duck.agent.turn import count_images, render, system_prompt
from duck.config import load_config
from duck.paths import SHARED
from duck.llm.render import ChatTemplate, HistoryError, default_template

QWEN38 = SHARED / "qwen3.8" / "chat_template.jinja"


def _call(i: int, code: str = "action('UP')") -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": code})}}


def _turn(ctx: Context, i: int, size: int = 2000) -> None:
    ctx.begin_turn({"role": "user", "content": f"turn {i} " + "u" * size}, index=i, level=1, actions_before=i)
    ctx.add({"role": "assistant", "content": "x" * size, "reasoning": "r", "reasoning_content": "r",
             "tool_calls": [_call(i)]})
    ctx.add({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})


def _is_prefix(a: list, b: list) -> bool:
    return len(a) <= len(b) and all(x is y for x, y in zip(a, b))


def test_history_only_grows_at_its_end_until_a_trim():
    ctx = Context("system prompt", budget=100_000, reserve=4000)
    prev = ctx.messages()
    for i in range(20):
        _turn(ctx, i)
        assert not ctx.fit()
        now = ctx.messages()
        assert _is_prefix(prev, now)  # the same objects, never rewritten
        prev = now
    assert ctx.evictions == 0 and ctx.trims == []


def test_a_trim_drops_one_block_down_to_the_low_water_mark_and_adds_no_summary():
    ctx = Context("system prompt", budget=20_000, reserve=2000)  # low water 0.45 by default
    trimmed_at, prev = [], ctx.messages()
    for i in range(60):
        _turn(ctx, i)
        before = ctx.estimate()
        if ctx.fit():
            trimmed_at.append(i)
            assert before > 20_000 - 2000 - 600  # only when prompt + output cap (+3% for estimates) pass it
            now = ctx.messages()
            assert now[0] is prev[0]  # the system prompt stays
            assert now[1]["content"].startswith("To fit the context, the first ")  # the trim line, no summary
            assert now[2] is ctx.turns[0].messages[0] and now[2]["content"].startswith("turn ")
            assert ctx.estimate() <= 0.45 * 20_000
            assert ctx.turns[-1].index == i  # the current turn is kept
        else:
            assert _is_prefix(prev, ctx.messages())
        prev = ctx.messages()
    assert 3 <= len(trimmed_at) <= 10 and len(ctx.trims) == len(trimmed_at)
    assert np.diff(trimmed_at).min() >= 5  # about half the budget of growth between trims
    assert all(t["tokens_before"] > t["tokens_after"] and t["dropped_tokens"] > 0 for t in ctx.trims)


def test_the_carried_message_follows_the_system_prompt_after_every_trim_and_only_then():
    made = []

    def carry():
        made.append({"role": "user", "content": f"Memory for level 1 (version {len(made)})."})
        return made[-1]

    ctx = Context("system prompt", budget=20_000, reserve=2000, carry=carry)
    for i in range(40):
        _turn(ctx, i)
        if ctx.fit():
            assert ctx.messages()[1]["content"].endswith("\n\n" + made[-1]["content"])  # after the trim line
            assert ctx.messages()[2] is ctx.turns[0].messages[0]
    assert len(made) == len(ctx.trims) >= 2  # asked once per trim, never in between
    assert ctx.messages()[1]["content"].endswith(made[-1]["content"])
    # a carried message that is not a user message is refused, the trim still happens (and says so)
    bad = Context("s", budget=20_000, reserve=2000, carry=lambda: {"role": "assistant", "content": "x"})
    for i in range(20):
        _turn(bad, i)
        bad.fit()
    assert bad.trims and bad.messages()[1]["role"] == "user" and bad.messages()[1]["content"].startswith("To fit")
    assert bad.messages()[1]["content"].endswith("`history`.") and bad.messages()[2]["content"].startswith("turn ")


def test_after_a_trim_one_fact_line_says_which_steps_went_and_that_the_session_kept_everything():
    """The review: after a trim the kept history began with "Your last call played 1 action ..."
    about a call no longer shown, under a bare "Solved levels:" (nothing at all before the first
    solved level), and nothing said the model's definitions still exist."""
    from duck.agent.memory import LevelMemory
    memory = LevelMemory()
    ctx = Context("system prompt", budget=20_000, reserve=2000, carry=memory.carry)
    heads = []
    for i in range(40):
        ctx.begin_turn({"role": "user", "content": f"turn {i} " + "u" * 2000}, index=i, level=1, actions_before=3 * i)
        ctx.add({"role": "assistant", "content": "x" * 2000, "tool_calls": [_call(i)]})
        ctx.add({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
        if ctx.fit():
            heads.append((len(ctx.removed), ctx.turns[0].steps, ctx.messages()[1]["content"]))
    assert len(heads) >= 2
    for gone, first, text in heads:  # cumulative over the trims: every removed turn, from step 0
        assert text == (f"To fit the context, the first {gone} turns of this conversation (step 0 to step {first}) were "
                        f"removed; the history below starts at step {first}. Only messages were removed: the Python "
                        "session keeps every definition (`dir()` lists them), `notes` and `history`.\n\n"
                        "Solved levels: none yet.")
        assert first == 3 * gone
    assert ctx.messages()[2]["content"].startswith(f"turn {heads[-1][0]} ")


def test_the_prompt_size_is_the_servers_usage_plus_what_came_after():
    ctx = Context("s" * 340, budget=10_000, reserve=1000)
    ctx.begin_turn({"role": "user", "content": "u" * 340}, index=0, level=1, actions_before=0)
    sent = len(ctx.messages())
    ctx.add({"role": "assistant", "content": "a" * 34})
    ctx.observe(sent, prompt_tokens=1000, completion_tokens=50)
    reply = ctx.turn_tokens(ctx.current) - ctx.current.counts[0].tokens
    assert ctx.estimate() == pytest.approx(1000 + reply, abs=1)  # the server's count, plus the reply
    ctx.add({"role": "tool", "content": "t" * 340})
    ctx.observe(len(ctx.messages()), prompt_tokens=1400)  # the delta calibrates the estimates
    assert ctx.estimate() == 1400
    assert ctx.counter.estimator.observations == 1


def test_a_turn_that_alone_outgrows_the_budget_raises_and_says_whether_it_is_fresh():
    ctx = Context("s", budget=3000, reserve=500)
    _turn(ctx, 0, size=20_000)
    with pytest.raises(ContextFull) as e:
        ctx.fit()
    assert not e.value.fresh and e.value.tokens > e.value.limit == 2500 - 90  # (estimates: 3% headroom)
    dropped = ctx.drop_current()
    assert dropped.index == 0 and ctx.turns == [] and ctx.head == []
    ctx.begin_turn({"role": "user", "content": "u" * 20_000}, index=1, level=1, actions_before=0)
    with pytest.raises(ContextFull) as e:
        ctx.fit()
    assert e.value.fresh  # the opening message alone: no turn can fit
    with pytest.raises(ValueError):
        ctx.begin_turn({"role": "tool", "content": "x"}, index=2, level=1, actions_before=0)


def _random_turn(ctx: Context, rng: random.Random, i: int) -> None:
    """A turn as the loop builds them: the turn message, then calls with results, corrections,
    several tool calls in one reply, cut replies without a call."""
    ctx.begin_turn({"role": "user", "content": [{"type": "text", "text": f"turn {i} " + "u" * rng.randint(50, 3000)},
                                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                   index=i, level=1, actions_before=i)
    for call in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.15:  # a reply without a call, then the corrective user message
            ctx.add({"role": "assistant", "content": "", "reasoning": "r" * rng.randint(0, 9000)})
            ctx.add({"role": "user", "content": "Your reply had no tool call."})
            continue
        n = 2 if kind > 0.85 else 1
        ctx.add({"role": "assistant", "content": "c" * rng.randint(0, 400), "reasoning": "r" * rng.randint(0, 6000),
                 "tool_calls": [_call(i * 10 + k, "print(1)\n" * rng.randint(1, 80)) for k in range(n)]})
        for k in range(n):
            ctx.add({"role": "tool", "tool_call_id": f"c{i * 10 + k}", "content": "t" * rng.randint(10, 4000)})


@pytest.mark.skipif(not QWEN38.is_file(), reason="no Qwen3.8 chat template under ../shared")
@pytest.mark.parametrize("carried", [False, True])
def test_no_trim_drops_the_current_turn_or_leaves_a_history_the_template_rejects(carried):
    """Random turns (sizes, calls, corrections, several calls per reply) at small budgets:
    after every fit the current turn is whole and last, and Qwen3.8's template renders the
    history (it raises "No user query found" on a history without a user turn)."""
    template = ChatTemplate(QWEN38)
    rng = random.Random(f"False{carried}")
    carry = (lambda: {"role": "user", "content": "carried memory"}) if carried else None
    trims = fulls = 0
    for budget in (6000, 9000, 16_000):
        ctx = Context("system prompt", budget=budget, reserve=budget // 4, carry=carry)
        for i in range(60):
            _random_turn(ctx, rng, i)
            current, messages = ctx.current, list(ctx.current.messages)
            try:
                trims += ctx.fit()
            except ContextFull:
                fulls += 1
                ctx.drop_current()
                continue
            assert ctx.current is current and ctx.current.messages == messages
            sent = ctx.messages()
            assert sent[-len(messages):] == messages
            try:
                template.render(sent, preserve_thinking=True)
            except HistoryError as e:
                pytest.fail(f"budget {budget}, turn {i}: the template rejects the history: {e}")
    assert trims >= 10 and fulls >= 1  # both paths were taken


def test_prompt_templates_are_strict():
    import jinja2
    with pytest.raises(jinja2.UndefinedError):
        render("system.j2")  # missing variables are an error, not an empty string
    cfg = load_config()
    plain = system_prompt(cfg)
    cfg.agent.guards = not cfg.agent.guards
    other = system_prompt(cfg)
    assert "python" in plain and "explore(" not in plain  # the retired world-model tools are not offered
    assert other != plain  # what it says follows the switch it describes (agent.guards)


def test_the_context_follows_the_field_and_the_old_arm_of_the_bench_is_reachable():
    """No summary and the server's counts are not switches any more (settled: FIELD §2, DESIGN §4);
    the context bench's old arm (32K, eviction to half, cut replies kept whole) still loads."""
    from devkit.bench.context import OLD
    old, new = load_config(overrides=OLD), load_config()
    assert (old.agent.context_tokens, old.agent.evict_to, old.model.cut_thinking_chars) == (32768, 0.5, 0)
    assert (new.agent.context_tokens, new.agent.evict_to, new.model.cut_thinking_chars) == (131072, 0.45, 4000)
    assert not {"trim_summary", "exact_tokens"} & set(type(new.agent).model_fields)


@pytest.mark.public
@pytest.mark.slow
@pytest.mark.skipif(not default_template().real, reason="no chat template under ../shared")
def test_context_benchmark_runs_on_the_start_of_a_recorded_game(public, tmp_path, capsys):
    from devkit.bench.context import main
    traces = SHARED / "duck-traces"
    if not (traces / "turns").is_dir():
        pytest.skip("duck-traces not present")
    assert main(["--traces", str(traces), "--games", str(public), "--game", "ft09", "--turns", "16",
                 "--budget", "16000", "--old-budget", "12000", "--synthetic-hours", "0", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    for arm in ("new", "old"):
        a = out["traces"][arm]
        assert a["actions_identical"] == 1.0 and a["trims_per_game"] >= 1
        assert a["prompt_tokens_max"] <= a["budget_tokens"]
        assert 0 < a["prefix_share_mean"] <= 1 and a["harness_ms_per_turn_median"] > 0
        assert a["reprefill_tokens_per_trim"] > 0


def _image_turn(ctx: Context, i: int, images: int = 1) -> None:
    pic = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    ctx.begin_turn({"role": "user", "content": [pic] * images + [{"type": "text", "text": f"turn {i}"}]},
                   index=i, level=1, actions_before=i)
    ctx.add({"role": "assistant", "content": "ok", "tool_calls": [_call(i)]})
    ctx.add({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})


def test_a_history_at_the_image_cap_trims_before_the_next_turn_so_no_prompt_passes_it():
    """Issue 35: with the history at `max_images` (images_per_prompt), the next turn's board
    made 401 of 400 (vLLM: HTTP 400, retried unchanged until ModelDown). Now the loop asks
    `fit(images=N)` before it builds the turn: old turns go, down to the low-water mark, and
    the turn's images have room; a request-time `fit()` keeps every prompt within the cap."""
    ctx = Context("s", budget=1_000_000, reserve=1000, max_images=10)
    for i in range(5):
        _image_turn(ctx, i, 2)
    assert count_images(ctx.messages()) == 10 and not ctx.fit()  # at the cap: a request may hold all 10
    assert not ctx.fit(images=0) and ctx.evictions == 0
    assert ctx.fit(images=2)  # the next turn's board and diff would make 12
    assert count_images(ctx.messages()) == 2 and [t.index for t in ctx.turns] == [4]  # the last turn stays
    assert ctx.messages()[1]["content"].startswith("To fit the context, the first 4 turns")
    _image_turn(ctx, 5, 2)
    assert not ctx.fit() and count_images(ctx.messages()) == 4
    for i in range(6, 9):  # 10 again, then a request-time trim when a turn passes the cap anyway
        _image_turn(ctx, i, 2)
    _image_turn(ctx, 9, 1)
    assert count_images(ctx.messages()) == 11 and ctx.fit() and count_images(ctx.messages()) == 3  # (<= 4.5)


def test_a_turn_alone_over_the_image_cap_is_context_full():
    ctx = Context("s", budget=1_000_000, reserve=1000, max_images=2)
    assert not ctx.fit(images=3)  # nothing to trim before the first turn: nothing raises here
    _image_turn(ctx, 0, 3)
    with pytest.raises(ContextFull, match=r"the current turn alone holds 3 images \(limit 2: "
                                          r"model.serve.images_per_prompt\)") as e:
        ctx.fit()
    assert e.value.fresh is False  # (its assistant and tool messages follow the user message)
