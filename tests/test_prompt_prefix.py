"""Every prompt the agent sends, rendered with the real Qwen3.6 chat template as vLLM 0.19
applies it (duck.stub_render), is a prefix of the next one, except right after the context
dropped old turns: what makes the server's prefix cache hit on every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duck.agent import AgentPolicy
from duck.config import load_config
from duck.games import GameSource
from duck.play import play_game
from duck.stub_render import SHARED
from duck.stub_server import SolutionModel, StubServer, TraceModel, default_template, load_trace

from conftest import BUNDLED, PUBLIC

pytestmark = pytest.mark.skipif(not default_template().real, reason=f"no chat template under {SHARED}")


def boundaries(prompts: list[dict]) -> tuple[int, int, list[int]]:
    """(boundaries checked, evictions, requests whose prompt does not extend the previous
    one although its messages only grew)."""
    checked, evictions, broken = 0, 0, []
    last: dict[str, dict] = {}
    for i, p in enumerate(prompts):
        prev = last.get(p["conversation"])
        last[p["conversation"]] = p
        if prev is None:
            continue
        if p["messages"][:len(prev["messages"])] != prev["messages"]:
            evictions += 1  # old turns dropped (or a fresh start): the prompt changes once here
            continue
        checked += 1
        if not p["prompt"].startswith(prev["prompt"]):
            broken.append(i)
    return checked, evictions, broken


def test_every_prompt_extends_the_previous_one_on_a_bundled_game(tmp_path):
    source = GameSource.offline(BUNDLED)
    game = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    server = StubServer(SolutionModel(BUNDLED), keep_prompts=True)
    with server as url:
        policy = AgentPolicy(seed=0, model_url=url, config=load_config(overrides=["model.retries=0"]))
        res = play_game(source, game, policy, max_actions=100, record_path=tmp_path / "r.jsonl")
    assert res.state == "WIN"
    checked, evictions, broken = boundaries(server.prompts)
    assert checked == len(server.prompts) - 1 and evictions == 0 and broken == []


TRACES = SHARED / "duck-traces"


@pytest.mark.public
@pytest.mark.skipif(not (TRACES / "runs.jsonl").is_file(), reason="duck-traces not present")
def test_every_prompt_extends_the_previous_one_in_a_replayed_duck_game(tmp_path, public):
    """The Duck's longest complete run (r11l, pass 0, 145 requests) through the agent with a
    16K budget, so that old turns are dropped several times on the way."""
    game, pass_ = "r11l-495a7899", 0
    source = GameSource.offline(public)
    if game not in {g.game_id for g in source.games()}:
        pytest.skip(f"{game} not among the public games")
    turns = load_trace(TRACES, game, pass_)
    cfg = load_config(overrides=["agent.context_tokens=16384", "agent.fallback=null", "agent.trace_replay=true",
                                 "model.retries=0", "agent.failures_before_fallback=1"])
    server = StubServer(TraceModel(turns), keep_prompts=True)
    with server as url:
        policy = AgentPolicy(seed=0, model_url=url, config=cfg, pass_=pass_)
        res = play_game(source, game, policy, max_actions=200, record_path=tmp_path / "r.jsonl", pass_=pass_)
    assert res.error is None and len(server.prompts) > 100
    checked, evictions, broken = boundaries(server.prompts)
    assert evictions == policy.ctx.evictions >= 2
    assert checked == len(server.prompts) - 1 - evictions and broken == []
