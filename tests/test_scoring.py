"""Our scoring from records must equal the toolkit's scorecard for the same play."""

from __future__ import annotations

import random

import pytest
from arc_agi import EnvironmentScoreCalculator

from duck.game.actions import RESET, Action
from duck.game.source import GameSource
from duck.play.session import play_game
from duck.play.record import read_record
from duck.play.scoring import game_score, level_score, score_record
from tests.conftest import solutions


def test_level_score_is_capped_and_squared():
    assert level_score(10, 10) == 100.0
    assert level_score(10, 20) == 25.0
    assert level_score(10, 5) == 115.0  # capped at 1.15
    assert level_score(10, 0) == 0.0


@pytest.mark.parametrize("seed", range(200))
def test_game_score_equals_toolkit_calculator(seed):
    rng = random.Random(seed)
    baselines = [rng.randint(5, 200) for _ in range(rng.randint(1, 10))]
    done = rng.randint(0, len(baselines))
    level_actions = [rng.randint(1, 600) for _ in range(done)]
    calc = EnvironmentScoreCalculator()
    for i, b in enumerate(baselines):
        calc.add_level(i + 1, i < done, level_actions[i] if i < done else 7, b)
    assert game_score(baselines, level_actions) == pytest.approx(calc.to_score().score, abs=1e-9)


class Scripted:
    """Plays a fixed action list (a real policy, just not a clever one)."""

    name = "scripted"

    def __init__(self, actions):
        self.actions = actions

    def play(self, session):
        for a in self.actions:
            session.step(a)


def _inefficient_solution(levels, rng):
    """The known solution with wasted moves and mid-level RESETs mixed in."""
    out = []
    for level in levels:
        out += [Action(1)] * rng.randint(0, 3)
        if out and rng.random() < 0.7:
            out.append(RESET)
        out += [Action.from_json(a) for a in level]
    return out


@pytest.mark.parametrize("game_id", sorted(solutions()))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_record_score_equals_scorecard_on_bundled_games(bundled, tmp_path, game_id, seed):
    levels = solutions()[game_id]
    rng = random.Random(seed)
    k = rng.randint(1, len(levels))  # play some levels, not always all
    source = GameSource.offline(bundled)
    policy = Scripted(_inefficient_solution(levels[:k], rng) + [Action(1)] * rng.randint(0, 5))
    res = play_game(source, game_id, policy, max_actions=10_000, record_path=tmp_path / "r.jsonl")
    ours = score_record(read_record(tmp_path / "r.jsonl"))
    card = source.scorecard()
    theirs = next(e for e in card.environments if e.id == game_id)
    assert res.levels == ours.levels == theirs.levels_completed >= 1
    assert ours.actions == theirs.actions
    assert ours.score == pytest.approx(theirs.score, abs=1e-9)
    assert ours.level_actions == theirs.runs[0].level_actions[: ours.levels]


@pytest.mark.public
def test_record_score_equals_scorecard_on_public_games(public, tmp_path):
    from duck.run import play_folder

    doc = play_folder(public, tmp_path, policy="random", seed=3, max_actions=300, workers=2)
    assert len(doc["games"]) == 25
    assert doc["score"] == pytest.approx(doc["toolkit_score"], abs=1e-9)
