"""Click feedback (duck/explorer/feedback.py): a mark drawn around the last click for many
actions, found from transitions and painted out of the explorer's view of the board.

Played through the real toolkit on two small games in tests/fixtures/feedback_games/:
zf01 draws a ring and a cross around every click for 12 actions (as ~50 community games
do); zm01 moves a piece to the clicked cell, which looks like a mark moving from click to
click but is not one (the piece was on the board before any click). The bundled zc01
(tiles that toggle) must not be taken for one either.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from arc_agi import Arcade, OperationMode
from arcengine import GameAction

from duck.explorer.feedback import ClickFeedback
from duck.explorer.policy import Explorer
from duck.game.source import GameSource
from duck.play.record import read_record
from duck.play.session import play_game

FEEDBACK_GAMES = Path(__file__).resolve().parent / "fixtures" / "feedback_games"
BUNDLED = Path(__file__).resolve().parent / "games"
FOUND = "click feedback found"


class Driver:
    """Steps a game through arc_agi and feeds every transition to a ClickFeedback."""

    def __init__(self, games: Path, game_id: str) -> None:
        self.env = Arcade(environments_dir=str(games), operation_mode=OperationMode.OFFLINE).make(game_id)
        self.grid = np.array(self.env.observation_space.frame[-1])
        self.levels = 0
        self.fb = ClickFeedback()
        self.view = self.fb.view(self.grid)

    def step(self, action) -> np.ndarray:
        if isinstance(action, tuple):
            obs = self.env.step(GameAction.ACTION6, data={"x": action[1], "y": action[2]})
        else:
            obs = self.env.step(GameAction.from_id(action))
        after = np.array(obs.frame[-1])
        ordinary = obs.levels_completed == self.levels
        self.levels = obs.levels_completed
        self.fb.observe(self.grid, action, after, None, ordinary)
        self.grid, self.view = after, self.fb.view(after)
        return self.view


def _cell(x: int, y: int) -> tuple[int, int, int]:
    """A click on the centre of zf01's cell (x, y): 16 pixels per cell."""
    return (6, 16 * x + 8, 16 * y + 8)


def test_a_ring_drawn_around_every_click_is_found_and_painted_out():
    d = Driver(FEEDBACK_GAMES, "zf01-00000001")
    # clicks on unlit cells far from the lit L, each followed by keys that do nothing
    for action in [_cell(3, 3), 1, 2, _cell(3, 0), 1, 2, _cell(0, 3), 1, 2, _cell(3, 3)]:
        d.step(action)
    assert d.fb.on and d.levels == 0
    before_click = d.view
    raw_before = d.grid
    after_click = d.step(_cell(2, 0))  # toggles (2,0) (1,0) (3,0) (2,1): lights (2,0), (3,0)...
    assert not np.array_equal(d.grid, after_click)  # the mark is in the board, not in the view
    marked = d.grid != after_click
    ys, xs = np.nonzero(marked)
    assert max(abs(ys - 8).max(), abs(xs - 40).max()) <= 4  # only around the click point
    # the click's own change stays visible: cell (3, 0) was lit by it, away from the mark
    assert raw_before[4, 60] != d.grid[4, 60] and after_click[4, 60] == d.grid[4, 60]
    # keys that do nothing while the ring grows and shrinks leave the view as it was
    for key in (1, 2, 3, 4, 1, 2):
        assert np.array_equal(d.step(key), after_click)
        assert not np.array_equal(d.grid, before_click)


@pytest.mark.parametrize("games,game_id,actions", [
    # the piece jumps to each clicked cell (it was on the board before the first click)
    (FEEDBACK_GAMES, "zm01-00000001", [(6, 12, 36), (6, 44, 12), (6, 20, 52), (6, 52, 28),
                                       (6, 12, 12), (6, 36, 44), (6, 60, 4), (6, 28, 20)]),
    # tiles that toggle where clicked
    (BUNDLED, "zc01-00000001", [(6, 2, 2), (6, 20, 20), (6, 45, 20), (6, 20, 45), (6, 45, 45),
                                (6, 20, 20), (6, 45, 20)]),
])
def test_a_piece_moved_to_the_click_or_a_toggled_tile_is_not_a_mark(games, game_id, actions):
    d = Driver(games, game_id)
    for a in actions:
        view = d.step(a)
        assert np.array_equal(view, d.grid)
    assert not d.fb.on


def _play(games: Path, game_id: str, tmp_path, seed: int, **options):
    path = tmp_path / f"{game_id}-{seed}-{sorted(options.items())}.jsonl"
    play_game(GameSource.offline(games), game_id, Explorer(seed=seed, **options),
              max_actions=300, record_path=path, seed=seed)
    return read_record(path)


def _found(rec) -> bool:
    return any(FOUND in (e.get("message") or "") for e in rec.events)


def test_the_explorer_completes_more_levels_once_it_paints_the_mark_out(tmp_path):
    """With the mark in its states every click and every key after one is a new state; with
    it painted out the explorer completes more levels (seeds 0-2, 300 actions each)."""
    levels = {True: 0, False: 0}
    for seed in (0, 1, 2):
        on = _play(FEEDBACK_GAMES, "zf01-00000001", tmp_path, seed)
        off = _play(FEEDBACK_GAMES, "zf01-00000001", tmp_path, seed, feedback=False)
        assert _found(on) and not _found(off)
        levels[True] += on.end["levels"]
        levels[False] += off.end["levels"]
    assert levels[True] > levels[False]


def test_the_explorer_wins_the_jump_game_without_finding_a_mark(tmp_path):
    rec = _play(FEEDBACK_GAMES, "zm01-00000001", tmp_path, 0)
    assert not _found(rec)
    assert rec.end["levels"] == 2
