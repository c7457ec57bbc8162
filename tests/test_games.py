"""Game access through the real toolkit: actions, the handle's guards, the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from duck.game.actions import RESET, Action
from duck.game.source import GameError, GameSource, matches
from duck.game.gateway import LocalGateway
from tests.conftest import solutions


def test_action_parsing_and_errors():
    assert Action.parse("up") == Action(1)
    assert Action.parse("ACTION7") == Action.parse("UNDO") == Action(7)
    assert Action.parse("click 12, 40") == Action(6, 12, 40)
    assert str(Action.click(3, 4)) == "CLICK 3 4"
    assert Action.from_json(Action.click(3, 4).to_json()) == Action.click(3, 4)
    for bad, msg in [("", "empty"), ("JUMP", "unknown action"), ("CLICK 1", "needs x and y"),
                     ("CLICK 64 0", "outside")]:
        with pytest.raises(ValueError, match=msg):
            Action.parse(bad)
    with pytest.raises(ValueError, match="no coordinates"):
        Action(1, 3, 4)


def test_observation_keeps_every_animation_frame(bundled):
    src = GameSource.offline(bundled)
    anim = next(g.game_id for g in src.games() if g.game_id.startswith("zs01"))
    game = src.make(anim)
    first = Action.from_json(solutions()[anim][0][0])
    obs = game.step(first)
    assert len(obs.frames) > 1 and obs.grid.shape == (64, 64)
    assert game.actions == 1 and game.level_actions == 1


def test_an_observation_stays_as_it_was_when_the_game_redraws_its_buffer():
    """zr01 returns one frame buffer it redraws on every action (as bp35 does): the
    toolkit's frame of an earlier action changes under its holder; ours must not."""
    from arc_agi import Arcade, OperationMode
    from arcengine import GameAction

    games = Path(__file__).resolve().parent / "fixtures" / "engine_games"
    raw = Arcade(environments_dir=str(games), operation_mode=OperationMode.OFFLINE).make("zr01")
    held = raw.observation_space.frame[-1]
    seen = held.copy()
    raw.step(GameAction.ACTION1)
    assert not np.array_equal(held, seen)  # the fixture does reproduce the aliasing

    src = GameSource.offline(games)
    game = src.make(src.game_ids(["zr01"])[0])
    history = [game.obs] + [game.step(Action(1)) for _ in range(3)]
    dots = [int(np.flatnonzero(o.grid[3 * 8] == 4)[0]) // 8 for o in history[:3]]
    assert dots == [0, 1, 2] and history[-1].state == "WIN"
    for o in history:
        with pytest.raises(ValueError, match="read-only"):
            o.grid[0, 0] = 1


def test_games_named_by_id_or_prefix_and_an_unknown_name_is_an_error(bundled):
    src = GameSource.offline(bundled)
    assert src.game_ids() == ["zb01-00000001", "zc01-00000001", "zs01-00000001"]
    assert src.game_ids(["zs01", "zb01-00000001"]) == ["zb01-00000001", "zs01-00000001"]
    assert matches("ls20-0c556536", ["ls20"]) and not matches("ls20-0c556536", ["ls2", "ls20-0"])
    with pytest.raises(GameError, match="no game named zq01, zb01-1"):
        src.game_ids(["zs01", "zq01", "zb01-1"])


def test_many_threads_make_games_of_one_source(bundled):
    """The runner's and the pool's threads share one source: make() is one at a time inside."""
    from concurrent.futures import ThreadPoolExecutor
    src = GameSource.offline(bundled)
    ids = src.game_ids() * 3
    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        games = list(pool.map(src.make, ids))
    assert [g.game_id for g in games] == ids
    assert all(g.obs is not None and g.step(Action(1)).frames for g in games if 1 in g.obs.available_actions)
    assert src.close() is not None


def test_reset_guard_and_nothing_sent_after_game_over(bundled):
    src = GameSource.offline(bundled)
    gid = next(g.game_id for g in src.games() if g.game_id.startswith("zb01"))
    game = src.make(gid)
    assert game.would_restart_game(RESET)
    with pytest.raises(GameError, match="restart the whole game"):
        game.step(RESET)
    moves = 0
    while game.obs.state != "GAME_OVER":
        game.step(Action(1) if moves % 2 == 0 else Action(2))
        moves += 1
        assert moves < 500, "the budget game never ended"
    counted = game.actions
    assert game.step(Action(1)).state == "GAME_OVER" and game.actions == counted  # not sent
    obs = game.step(RESET)  # the one useful action after GAME_OVER: restarts the level
    assert obs.state == "NOT_FINISHED" and game.actions == counted + 1 and game.level_actions == 0


def test_play_cli_writes_records_and_score(bundled, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "duck.cli", "play", "--games", str(bundled), "--policy",
                        "random", "--seed", "1", "--max-actions", "150", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    doc = json.loads((out / "score.json").read_text())
    assert set(doc["games"]) == {g.game_id for g in GameSource.offline(bundled).games()}
    for g in doc["games"].values():
        assert {"score", "levels", "actions", "levels_total", "level_actions"} <= set(g)
        assert len(g["level_actions"]) == g["levels"] and g["actions"] <= 150
    assert doc["score"] == pytest.approx(doc["toolkit_score"], abs=1e-9)
    assert printed["score"] == pytest.approx(doc["score"], abs=1e-3)
    again = subprocess.run([sys.executable, "-m", "duck.cli", "play", "--games", str(bundled),
                            "--policy", "random", "--out", str(out)], capture_output=True, text=True)
    assert again.returncode != 0 and "already holds records" in again.stderr


def test_a_broken_game_is_reported_and_the_others_are_played(games_with_broken, tmp_path):
    from duck.run import play_folder

    doc = play_folder(games_with_broken, tmp_path, policy="random", max_actions=30)
    broken = {g: v for g, v in doc["games"].items() if "error" in v}
    assert len(broken) == 1 and next(iter(broken)).startswith("zx01")
    assert all(v["actions"] == 30 or v["levels"] == v["levels_total"]
               for g, v in doc["games"].items() if g not in broken)


def test_competition_gateway_one_scorecard_closed_at_the_end(bundled):
    with LocalGateway(bundled) as gw:
        src = GameSource.competition(gw.url)
        ids = [g.game_id for g in src.games()]
        assert len(ids) >= 3 and all(g.baselines in (None, []) for g in src.games())  # hidden
        game = src.make(ids[0])
        for _ in range(4):
            game.step(Action(1) if 1 in game.obs.available_actions else Action.click(1, 1))
        card = src.close()
        assert src.close() is None  # closing twice is harmless
    entry = next(e for e in card.environments if e.id == ids[0])
    assert entry.actions == 4
    assert {e.id for e in card.environments} == set(ids)  # unplayed games added at close
