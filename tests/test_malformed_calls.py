"""A tool call whose arguments are not valid JSON never reaches the history, and the game
goes on with the model answering. The stub server refuses such a history with HTTP 400 as
vLLM 0.19 does (it json.loads every past call), so a kept call would end the model's game
(three 400s, then the explorer): this fails if the client ever keeps one.

The broken calls are what vLLM 0.19 streams (tests/conformance measures them on the real
parser): code holding `</tool_call>` comes back as `{"code": "s = '"`, a reply cut by the
output cap inside a call as `{` with `finish_reason: "tool_calls"` and every output token used."""

from __future__ import annotations

import json

import pytest

from duck.config import ModelConfig, load_config
from duck.game.source import GameSource
from duck.llm.client import ModelClient, ModelError
from duck.play.session import play_game
from duck.play.record import read_record
from duck.policies import make_policy
from devkit.stub.models import FixedModel, action_code
from devkit.stub.server import StubServer

from conftest import BUNDLED, solutions

BROKEN_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "python", "arguments": '{"code": "s = \''}}]}


def test_the_stub_refuses_a_history_with_an_unreadable_call_like_vllm():
    with StubServer(FixedModel([{"content": "never"}])) as url:
        with pytest.raises(ModelError) as e:
            ModelClient(url, ModelConfig(name="stub", retries=0)).chat(
                [{"role": "user", "content": "u"}, BROKEN_CALL, {"role": "tool", "tool_call_id": "c1", "content": "x"}])
    assert e.value.status == 400 and "not valid JSON" in str(e.value)


def test_unreadable_calls_are_dropped_explained_and_the_model_plays_on(tmp_path):
    game = next(g for g in solutions() if g.startswith("zb01"))
    level = solutions()[game][0]
    seen: list[dict] = []

    def take(reply):
        def f(body):
            seen.append(body)
            return reply
        return f
    cap = 500
    model = FixedModel([take(r) for r in [
        {"reasoning": "Look.", "content": "World model: a board", "code": "print(current_frame.shape)"},
        # code holding `</tool_call>`: vLLM 0.19's parser stops the value there
        {"reasoning": "Print a tag.", "tool_calls": [{"name": "python", "arguments": '{"code": "s = \''}]},
        # cut by the output cap inside the call: 0.19 says "tool_calls", usage says the cap was used up
        {"reasoning": "Long code.", "tool_calls": [{"name": "python", "arguments": "{"}],
         "finish_reason": "tool_calls", "completion_tokens": cap},
        {"reasoning": "Play.", "content": "Plan: solve", "code": action_code(level)},
    ]])
    cfg = load_config(overrides=["model.retries=0", "model.name=stub", f"model.max_output_tokens={cap}",
                                 "agent.fallback=explorer", "agent.failures_before_fallback=1"])
    source = GameSource.offline(BUNDLED)
    with StubServer(model) as url:
        res = play_game(source, game, make_policy("llm", 0, config=cfg, model_url=url), max_actions=len(level),
                        record_path=tmp_path / "r.jsonl")
    rec = read_record(tmp_path / "r.jsonl")
    assert not [e for e in rec.events if e["kind"] in ("error", "fallback")]  # no 400, no explorer
    assert res.actions == len(level) and res.levels == 1  # played by the model's last call
    stats = [e["data"] for e in rec.events if e["kind"] == "model"]
    assert [s["dropped_calls"] for s in stats] == [[], ["invalid"], ["length"], []]
    assert [s["cut"] for s in stats] == [None, None, "length", None]
    history = seen[-1]["messages"]
    for m in history:
        for c in m.get("tool_calls") or []:
            assert isinstance(json.loads(c["function"]["arguments"]), dict)
    texts = [m["content"] for m in history if m["role"] == "user" and isinstance(m["content"], str)]
    assert "must not contain the literal text `</parameter>`" in texts[0] and "`</tool_call>`" in texts[0]
    assert "output limit inside its tool call" in texts[1]


def test_code_cut_at_a_parameter_tag_is_explained_not_run(tmp_path):
    """vLLM 0.33's qwen3_coder parser ends the code at a literal `</parameter>` inside it: the
    model's `s = '</parameter>'\\nprint(s)` arrives as a readable call holding `s = '` (the
    conformance suite measures it). The review: it was run, a SyntaxError the model cannot
    explain; now it gets the tag explanation as that call's tool result and nothing runs."""
    game = next(g for g in solutions() if g.startswith("zb01"))
    seen: list[dict] = []

    def take(reply):
        def f(body):
            seen.append(body)
            return reply
        return f
    model = FixedModel([take(r) for r in [
        {"reasoning": "Print a tag.", "tool_calls": [{"name": "python", "arguments": json.dumps({"code": "s = '"})}]},
        {"reasoning": "Triple quotes.", "tool_calls": [{"name": "python", "arguments": json.dumps(
            {"code": "html = '''<p>\nx"})}]},
        {"reasoning": "Play.", "code": "action('RIGHT')"},
        {"reasoning": "Look.", "code": "print(1)"},
    ]])
    cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null",
                                 "agent.failures_before_fallback=1"])
    with StubServer(model) as url:
        play_game(GameSource.offline(BUNDLED), game, make_policy("llm", 0, config=cfg, model_url=url), max_actions=5,
                  record_path=tmp_path / "r.jsonl")
    history = seen[-1]["messages"]
    tools = [m["content"] for m in history if m["role"] == "tool"]
    assert len(tools) == 3 and tools[2].startswith("actions: 1 played: RIGHT")
    for text in tools[:2]:
        assert text.startswith("Your code was not run: it ends inside a string its last line leaves open.")
        assert "`</parameter>`" in text and "SyntaxError" not in text
    rec = read_record(tmp_path / "r.jsonl")
    assert [a["action"] for a in rec.actions] == [[4]]
