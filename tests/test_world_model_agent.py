"""The agent with the world-model tools (agent.world_model_tools) end to end: the composition root's
kernel, the system prompt's method section, and a scripted model over HTTP (the stub server)
whose replies write a simulator of the board, check it, plan in it and play the plan, winning
every bundled game in no more actions than the human baselines."""

from __future__ import annotations

from typing import Any

from conftest import BUNDLED
from duck.config import load_config
from duck.game.source import GameSource
from duck.play.record import read_record
from duck.play.session import play_game
from duck.policies import make_policy
from devkit.stub.server import StubServer
from world_models.bundled import PLAY


class SimulatorModel:
    """Every turn, the same reply for a game: notes in the text, and Python that reads the board
    with objects(), defines encode/step/is_goal, checks them, plans and plays the plan."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        game = request["_session"].split("-")[0]
        last = request["messages"][-1]
        if last["role"] == "tool" and "NameError" in str(last["content"]):  # no tools here: act plainly
            return {"content": "Plan: no tools, move.", "code": "action('UP')"}
        return {"content": "World model: a piece on a board.\nPlan: simulate, check, plan, play the plan.",
                "reasoning": "Write the rules as code and search in them.", "code": PLAY[game]}


def _config(tools: bool) -> Any:
    return load_config(overrides=["model.retries=0", "agent.fallback=null", "agent.failures_before_fallback=1",
                                  "play.policy=llm", f"agent.world_model_tools={str(tools).lower()}"])


def test_a_scripted_model_with_the_tools_wins_every_bundled_game_within_the_baselines(tmp_path):
    source = GameSource.offline(BUNDLED)
    model = SimulatorModel()
    total, baseline = 0, 0
    with StubServer(model) as url:
        for g in source.games():
            path = tmp_path / f"{g.game_id}.jsonl"
            policy = make_policy("llm", 0, config=_config(True), model_url=url)
            res = play_game(source, g.game_id, policy, max_actions=200, record_path=path)
            assert res.state == "WIN" and res.score == 100.0, res
            rec = read_record(path)
            assert len(rec.actions) == sum(g.baselines), (g.game_id, [a["action"] for a in rec.actions])
            total += len(rec.actions)
            baseline += sum(g.baselines)
            assert [e for e in rec.events if e["kind"] == "error"] == []
    assert total <= baseline == 55
    system = model.requests[0]["messages"][0]["content"]
    assert "## Method: learn the rules as a simulator" in system and "`plan(step, start, is_goal" in system
    # the model saw check's and plan's answers in its tool results
    tool_texts = [m["content"] for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    assert any("found 13 actions (goal reached)" in t for t in tool_texts)
    assert any("check: 0 of 0 transitions" in t for t in tool_texts)


def test_without_the_flag_the_prompt_and_kernel_are_todays(tmp_path):
    source = GameSource.offline(BUNDLED)
    model = SimulatorModel()
    with StubServer(model) as url:
        game_id = source.game_ids(["zb01"])[0]
        policy = make_policy("llm", 0, config=_config(False), model_url=url)
        res = play_game(source, game_id, policy, max_actions=3, record_path=tmp_path / "zb01.jsonl")
    system = model.requests[0]["messages"][0]["content"]
    assert "## Method" not in system and "plan(step" not in system
    assert res.actions == 3  # each turn: the tools are not there (a NameError), then a plain move
    tool_texts = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("NameError: name 'objects' is not defined" in t for t in tool_texts)


def test_the_ab_arms_differ_in_the_tools_only():
    from conftest import ROOT
    from duck.lab.ab.config import config_diff, load_arm, policy_options
    exp = ROOT / "experiments"
    a = load_arm([str(exp / "baseline.toml")])
    b = load_arm([str(exp / "baseline.toml"), str(exp / "world-model-tools.toml")])
    assert [d["field"] for d in config_diff(a, b)] == ["agent.world_model_tools"]
    assert a.play.policy == "llm" and a.agent.guards  # today's defaults
    agents = [make_policy(c.play.policy, 0, **policy_options(c, unit_index=0)).llm() for c in (a, b)]
    assert agents[0].kernel_factory.__name__ == "Kernel" and agents[1].kernel_factory.__name__ == "factory"
    assert "## Method" in agents[1].ctx.system["content"] and "## Method" not in agents[0].ctx.system["content"]
