"""The bundled demo games in tests/games/, played through the real toolkit.

Every game folder tests/games/<id>/<version>/ holds <id>.py (class <Id>), metadata.json
(with the human baselines) and solution.json (a known shortest winning action list per
level; an action is [id] or [6, x, y]). These tests check that each game loads through
`arc_agi` in OFFLINE mode, is deterministic, is won by its solution with
levels_completed rising exactly at each level's last action, and that the toolkit's own
scorecard gives 100 when the solution is as long as the baseline. Game-specific tests
cover the animated keyboard game (zs01), the click game (zc01) and the budget game (zb01).

The deliberately broken game lives in tests/fixtures/broken_games/ (see its README.md).
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from arc_agi import Arcade, OperationMode
from arcengine import ActionInput, GameAction, GameState

TESTS = Path(__file__).resolve().parent
GAMES_DIR = TESTS / "games"
BROKEN_DIR = TESTS / "fixtures" / "broken_games"

EXPECTED = {  # id -> (available actions, number of levels)
    "zs01": ([1, 2, 3, 4, 7], 3),
    "zc01": ([6], 3),
    "zb01": ([1, 2, 3, 4], 2),
}


def _game_dirs() -> dict[str, Path]:
    return {p.parent.parent.name: p.parent for p in sorted(GAMES_DIR.rglob("metadata.json"))}


GAME_DIRS = _game_dirs()
GAME_IDS = sorted(GAME_DIRS)


def _meta(gid: str) -> dict:
    return json.loads((GAME_DIRS[gid] / "metadata.json").read_text())


def _solution(gid: str) -> list[list[list[int]]]:
    return json.loads((GAME_DIRS[gid] / "solution.json").read_text())["levels"]


@pytest.fixture(scope="module")
def arc() -> Arcade:
    return Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=str(GAMES_DIR))


def _make(arc: Arcade, gid: str, card: str | None = None):
    env = arc.make(gid, scorecard_id=card or arc.open_scorecard())
    assert env is not None, f"{gid} did not load"
    return env


def _step(env, action: list[int]):
    gid = GameAction.from_id(action[0])
    data = {"x": action[1], "y": action[2]} if action[0] == 6 else None
    obs = env.step(gid, data=data)
    assert obs is not None, f"step {action} failed"
    return obs


def _frames(obs) -> list[np.ndarray]:
    return [np.asarray(f) for f in obs.frame]


def _check_frames(obs) -> None:
    for f in _frames(obs):
        assert f.shape == (64, 64)
        assert f.min() >= 0 and f.max() <= 15


# ---------------------------------------------------------------------------- all games


def test_the_bundled_games_are_there():
    assert set(EXPECTED) <= set(GAME_IDS)
    assert len(GAME_IDS) >= 3


@pytest.mark.parametrize("gid", GAME_IDS)
def test_metadata_layout_and_solution_file(gid):
    d = GAME_DIRS[gid]
    meta = _meta(gid)
    version = d.name
    assert meta["game_id"] == f"{gid}-{version}"
    assert meta["local_dir"] == f"tests/games/{gid}/{version}"
    assert meta["title"] and meta["default_fps"] > 0 and meta["tags"]
    sol = _solution(gid)
    assert meta["baseline_actions"] == [len(level) for level in sol]
    for level in sol:
        for a in level:
            assert a[0] in range(1, 8)
            assert len(a) == (3 if a[0] == 6 else 1)
            if a[0] == 6:
                assert 0 <= a[1] <= 63 and 0 <= a[2] <= 63
    # the module documents its rules and defines the class the toolkit looks for
    tree = ast.parse((d / f"{gid}.py").read_text())
    assert len(ast.get_docstring(tree) or "") > 200
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert gid[0].upper() + gid[1:] in classes


@pytest.mark.parametrize("gid", GAME_IDS)
def test_loads(arc, gid):
    env = _make(arc, gid)
    obs = env.observation_space
    assert obs.state == GameState.NOT_FINISHED
    assert obs.levels_completed == 0
    assert obs.win_levels == len(_meta(gid)["baseline_actions"])
    assert len(obs.frame) == 1
    _check_frames(obs)
    if gid in EXPECTED:
        actions, levels = EXPECTED[gid]
        assert obs.available_actions == actions
        assert obs.win_levels == levels


def _wander(gid: str) -> list[list[int]]:
    """Some non-solution actions: blocked moves, undo, clicks on background and tiles."""
    avail = EXPECTED.get(gid, ([1, 2, 3, 4], 0))[0]
    seq: list[list[int]] = []
    for i in range(12):
        a = avail[i % len(avail)]
        seq.append([6, (7 * i + 3) % 64, (13 * i + 5) % 64] if a == 6 else [a])
    return seq


@pytest.mark.parametrize("gid", GAME_IDS)
def test_deterministic(arc, gid):
    seq = _wander(gid) + [[0]] + [a for level in _solution(gid) for a in level]

    def run() -> list[tuple]:
        env = _make(arc, gid)
        out = [(env.observation_space.state, env.observation_space.levels_completed,
                tuple(f.tobytes() for f in _frames(env.observation_space)))]
        for a in seq:
            obs = env.step(GameAction.RESET) if a[0] == 0 else _step(env, a)
            out.append((obs.state, obs.levels_completed, tuple(f.tobytes() for f in _frames(obs))))
        return out

    first, second = run(), run()
    assert first == second
    assert first[-1][0] == GameState.WIN


@pytest.mark.parametrize("gid", GAME_IDS)
def test_solution_wins_level_by_level(arc, gid):
    env = _make(arc, gid)
    sol = _solution(gid)
    for li, level in enumerate(sol):
        for ai, a in enumerate(level):
            obs = _step(env, a)
            _check_frames(obs)
            last = ai == len(level) - 1
            assert obs.levels_completed == li + (1 if last else 0), (li, ai, a)
            if last and li == len(sol) - 1:
                assert obs.state == GameState.WIN
            else:
                assert obs.state == GameState.NOT_FINISHED
            if last and li < len(sol) - 1:
                # a level-up returns the winning frame, then the next level's first frame
                assert len(obs.frame) >= 2


def test_scorecard_gives_100_at_baseline():
    arc = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=str(GAMES_DIR))
    card = arc.open_scorecard()
    for gid in GAME_IDS:
        env = _make(arc, gid, card)
        for level in _solution(gid):
            for a in level:
                _step(env, a)
        assert env.observation_space.state == GameState.WIN
    sc = arc.get_scorecard(card)
    scores = {e.id: e for e in sc.environments}
    for gid in GAME_IDS:
        entry = scores[_meta(gid)["game_id"]]
        assert entry.score == pytest.approx(100.0)
        run = entry.runs[0]
        assert run.level_actions == _meta(gid)["baseline_actions"]
        assert run.level_scores == pytest.approx([100.0] * len(_solution(gid)))
    assert sc.score == pytest.approx(100.0)


# ------------------------------------------------- baselines are shortest (keyboard games)


def _load_class(gid: str):
    d = GAME_DIRS[gid]
    spec = importlib.util.spec_from_file_location(f"bundled_{gid}", d / f"{gid}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, gid[0].upper() + gid[1:])


def _act(game, a: list[int]):
    data = {"x": a[1], "y": a[2]} if a[0] == 6 else {}
    return game.perform_action(ActionInput(id=GameAction.from_id(a[0]), data=data), raw=True)


@pytest.mark.parametrize("gid", ["zs01", "zb01"])
def test_keyboard_baselines_are_shortest(gid):
    """Breadth-first search over the engine itself: no level is won in fewer actions."""
    game = _load_class(gid)()
    _act(game, [0])
    for li, level in enumerate(_solution(gid)):
        start = copy.deepcopy(game)
        # key: the board without the HUD rows (the budget bar depends only on depth here)
        key0 = np.asarray(start.camera.render(start.current_level.get_sprites()))[:62].tobytes()
        seen = {key0}
        frontier = deque([(start, 0)])
        best = None
        while frontier and best is None:
            g, depth = frontier.popleft()
            for a in (1, 2, 3, 4):
                g2 = copy.deepcopy(g)
                obs = _act(g2, [a])
                if obs.levels_completed > li:
                    best = depth + 1
                    break
                if obs.state != GameState.NOT_FINISHED:
                    continue
                k = np.asarray(obs.frame[-1])[:62].tobytes()
                if k not in seen:
                    seen.add(k)
                    frontier.append((g2, depth + 1))
        assert best == len(level), (li, best, len(level))
        for a in level:
            _act(game, a)


# -------------------------------------------------------------- zs01: animation and undo


def test_zs01_moves_are_animated_cell_by_cell(arc):
    env = _make(arc, "zs01")
    start = _frames(env.observation_space)[-1]
    first = _solution("zs01")[0][0]
    obs = _step(env, first)
    frames = _frames(obs)
    assert len(frames) > 1
    prev = start
    for f in frames:  # every frame of the slide shows the player one cell further
        assert not np.array_equal(f, prev)
        prev = f
    # a move straight into a wall returns exactly one unchanged frame
    obs = _step(env, first)
    assert len(obs.frame) == 1 and np.array_equal(_frames(obs)[0], frames[-1])


def test_zs01_undo(arc):
    env = _make(arc, "zs01")
    start = _frames(env.observation_space)[-1]
    _step(env, [7])  # nothing to undo
    assert np.array_equal(_frames(env.observation_space)[-1], start)
    sol = _solution("zs01")[0]
    after_one = _frames(_step(env, sol[0]))[-1]
    _step(env, sol[1])
    obs = _step(env, [7])
    assert len(obs.frame) == 1 and np.array_equal(_frames(obs)[-1], after_one)
    obs = _step(env, [7])
    assert np.array_equal(_frames(obs)[-1], start)
    for a in sol:  # undo costs actions but does not block the solution
        obs = _step(env, a)
    assert obs.levels_completed == 1


# ------------------------------------------------------------------ zc01: clicks and tiles


def test_zc01_background_clicks_do_nothing_and_tiles_toggle(arc):
    env = _make(arc, "zc01")
    start = _frames(env.observation_space)[-1]
    for xy in [(0, 32), (63, 63), (32, 0), (31, 31), (2, 40)]:  # background, bars, gap
        obs = _step(env, [6, *xy])
        assert len(obs.frame) == 1 and np.array_equal(_frames(obs)[-1], start)
        assert obs.levels_completed == 0
    # the top-left tile is already on: clicking it turns it off, clicking again turns it on
    x, y = 20, 20
    on = int(start[y, x])
    off = _frames(_step(env, [6, x, y]))[-1]
    assert int(off[y, x]) != on and int(off[y, x]) == int(start[21, 43])
    back = _frames(_step(env, [6, x, y]))[-1]
    assert np.array_equal(back, start)
    obs = _step(env, _solution("zc01")[0][0])
    assert obs.levels_completed == 1


# ------------------------------------------------------------- zb01: budget and GAME_OVER


def _bar_width(frame: np.ndarray) -> int:
    return int((frame[62:64] == 11).all(axis=0).sum())


def test_zb01_budget_runs_out_then_reset_restarts_the_level(arc):
    env = _make(arc, "zb01")
    assert _bar_width(_frames(env.observation_space)[-1]) == 64
    sol = _solution("zb01")
    for a in sol[0]:
        obs = _step(env, a)
    assert obs.levels_completed == 1
    level2_start = _frames(obs)[-1]
    assert _bar_width(level2_start) == 64
    budget = 22  # level 2's budget (see the module docstring)
    widths = [64]
    for i in range(budget):
        obs = _step(env, [1])  # up is a wall at level 2's start: a wasted move
        widths.append(_bar_width(_frames(obs)[-1]))
        if i < budget - 1:
            assert obs.state == GameState.NOT_FINISHED
    assert obs.state == GameState.GAME_OVER
    assert obs.levels_completed == 1
    assert all(b < a for a, b in zip(widths, widths[1:]))  # the bar shrinks on every action
    assert widths[-1] == 0
    # after GAME_OVER a move does nothing (the engine returns no frame)
    assert len(env.step(GameAction.ACTION4).frame) == 0
    obs = env.step(GameAction.RESET)  # one RESET restarts the level, not the game
    assert obs.state == GameState.NOT_FINISHED
    assert obs.levels_completed == 1
    assert np.array_equal(_frames(obs)[-1], level2_start)
    for a in sol[1]:
        obs = _step(env, a)
    assert obs.state == GameState.WIN and obs.levels_completed == 2


# ------------------------------------------------------------------ the broken fixture


def test_broken_fixture_fails_to_make():
    arc = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=str(BROKEN_DIR))
    assert [e.game_id for e in arc.get_environments()] == ["zx01-00000001"]
    assert arc.make("zx01", scorecard_id=arc.open_scorecard()) is None
    # scanning tests/ sees the good games and the broken one together, copy-free
    both = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=str(TESTS))
    ids = {e.game_id.split("-")[0] for e in both.get_environments()}
    assert set(EXPECTED) | {"zx01"} <= ids
