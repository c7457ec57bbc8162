"""The agent loop on the real kernel (duck.sandbox.host): the bundled games won by a scripted model,
and the start of a recorded Duck run replayed through the full loop over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from duck.agent.loop import AgentPolicy
from duck.config import load_config
from duck.game.source import GameSource
from devkit.replay.caps import trace_caps
from devkit.replay.loop import ReplayKernel
from duck.play.record import read_record
from duck.play.session import play_game
from devkit.stub.models import SolutionModel, TraceModel
from devkit.stub.server import StubServer
from devkit.stub.traces import load_trace, recorded_actions
from duck.paths import SHARED

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "tests" / "games"
TRACES = SHARED / "duck-traces"


def _cfg():
    return load_config(overrides=["model.retries=0", "agent.fallback=null", "agent.failures_before_fallback=1"])


def test_scripted_model_wins_the_bundled_games_on_the_real_kernel(tmp_path):
    source = GameSource.offline(BUNDLED)
    with StubServer(SolutionModel(BUNDLED)) as url:
        for g in source.games():
            path = tmp_path / f"{g.game_id}.jsonl"
            res = play_game(source, g.game_id, AgentPolicy(seed=0, model_url=url, config=_cfg()),
                            max_actions=100, record_path=path)
            assert res.state == "WIN", res
            rec = read_record(path)
            assert all("turn" in a["info"] for a in rec.actions)
            assert any(e["kind"] == "model" for e in rec.events)


@pytest.mark.public
@pytest.mark.slow
@pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="duck-traces not present")
def test_the_start_of_a_duck_run_replays_through_the_loop(public, tmp_path):
    turns = load_trace(TRACES, "ft09", 0)[:12]
    expected = recorded_actions(turns)
    source = GameSource.offline(public)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("ft09"))
    path = tmp_path / "ft09.jsonl"
    cfg = _cfg()
    caps = trace_caps(turns)  # the recorded caps, which the replay's kernel applies
    with StubServer(TraceModel(turns)) as url:
        agent = AgentPolicy(0, cfg, model_url=url,
                            kernel_factory=lambda session, kcfg: ReplayKernel(session, kcfg, caps))
        play_game(source, game_id, agent,
                  max_actions=len(expected), record_path=path)
    assert [a["action"] for a in read_record(path).actions] == expected
