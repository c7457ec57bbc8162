"""Every prompt the agent sends, rendered with the served model's chat template as vLLM applies
it (duck.llm.render: Qwen3.8's by default), is a prefix of the next one, except right
after the context dropped old turns: what makes the server's prefix cache hit on every request."""

from __future__ import annotations


import pytest

from duck.agent.loop import AgentPolicy
from duck.config import load_config
from duck.game.source import GameSource
from duck.play.session import play_game
from duck.paths import SHARED
from devkit.replay.loop import ReplayKernel
from devkit.replay.caps import trace_caps
from devkit.stub.models import SolutionModel, TraceModel
from devkit.stub.server import StubServer
from duck.llm.render import default_template
from devkit.stub.traces import load_trace, recorded_actions

from conftest import BUNDLED

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
    cfg = load_config(overrides=["agent.context_tokens=16384", "agent.fallback=null",
                                 "model.retries=0", "agent.failures_before_fallback=1"])
    server = StubServer(TraceModel(turns), keep_prompts=True)
    with server as url:
        caps = trace_caps(turns)  # the recorded caps, applied by the replay's kernel
        policy = AgentPolicy(0, cfg, model_url=url, pass_=pass_,
                             kernel_factory=lambda session, kcfg: ReplayKernel(session, kcfg, caps))
        res = play_game(source, game, policy, max_actions=len(recorded_actions(turns)), record_path=tmp_path / "r.jsonl", pass_=pass_)
    assert res.error is None and len(server.prompts) > 100
    checked, evictions, broken = boundaries(server.prompts)
    assert evictions == policy.ctx.evictions >= 2
    assert checked == len(server.prompts) - 1 - evictions and broken == []
