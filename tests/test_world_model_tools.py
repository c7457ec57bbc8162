"""The world-model tools (duck.sandbox.tools, issue 16) in a real kernel on the bundled games:
perception, check, plan, explore (through the composition root's explorer), the simulator kept
across a restart. No model: the code a model would send is written here (tests/world_models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import BUNDLED
from duck.play.record import read_record
from duck.sandbox.host import Kernel
from world_models.bundled import GRID
from world_models.kernel import open_tools_kernel

BASELINES = {"zs01": [4, 6, 8], "zc01": [1, 3, 5], "zb01": [13, 15]}


@pytest.fixture
def tools_kernel(tmp_path: Path):
    """A kernel with the tools as the agent gets it (duck.policies.world_model_kernel: the
    explorer behind explore(n)); returns (kernel, record path)."""
    made: list[Kernel] = []

    def make(game: str, max_actions: int = 1000, timeout: float = 20.0) -> tuple[Kernel, Path]:
        kernel, _, path = open_tools_kernel(BUNDLED, game, tmp_path, max_actions, timeout,
                                            suffix=f"-{len(made)}")
        made.append(kernel)
        return kernel, path

    yield make
    for k in made:
        k.close()


def ok(kernel: Kernel, code: str) -> Any:
    r = kernel.run(code)
    assert r.kind == "ok", r.text
    return r


def test_objects_keep_their_ids_and_diff_and_controlled_see_the_move(tools_kernel):
    k, _ = tools_kernel("zs01")
    r = ok(k, "me = [o for o in objects() if o.color == 12][0]\nresult = [me.id, me.top, me.left, me.size]")
    pid, top, left, size = r.result
    assert size == 64 and (top, left) == (24, 48)  # level 1: the orange piece, one 8x8 cell
    ok(k, "action('DOWN')")  # slides down to the wall
    r = ok(k, "me = [o for o in objects() if o.color == 12][0]\nresult = [me.id, me.top, me.left]\n"
              "print(diff(previous_frame, current_frame))\nprint(controlled())")
    assert r.result == [pid, 48, 48]
    assert f"moved: #{pid} O64px (24,48)->(48,48) [+24,+0]" in r.stdout
    assert "'moves': {'DOWN': (24, 0)}" in r.stdout and "1 of 1 key presses" in r.stdout
    # a grid the model built is matched against the current frame
    r = ok(k, "g = current_frame.grid.copy()\ng[48:56, 48:56] = 5\ng[40:48, 48:56] = 12\n"
              "print(diff(current_frame, g))")
    assert f"#{pid} O64px (48,48)->(40,48) [-8,+0]" in r.stdout
    # a piece that shrinks is one object reshaped, not one vanished and another appeared
    r = ok(k, "g = current_frame.grid.copy()\ng[55, 48:56] = 5\nd = diff(current_frame, g)\nprint(d)\n"
              "result = [len(d['reshaped']), len(d['vanished']), len(d['appeared']), d['reshaped'][0]['id']]")
    assert r.result == [1, 0, 0, pid] and f"reshaped: #{pid} O 64px->56px at (48,48)" in r.stdout


@pytest.mark.parametrize("game", sorted(BASELINES))
def test_a_hand_written_simulator_passes_check_and_plans_the_baseline(tools_kernel, game):
    """Per level: plan from the level's start finds a plan of the baseline's length; then a few
    explorer actions (recorded like any other) and the plan from wherever they left the board.
    At the end, check over the whole recorded play predicts every compared transition."""
    k, path = tools_kernel(game)
    ok(k, GRID[game])
    state = "(encode(current_frame) if encode else current_frame.grid)"
    levels = len(BASELINES[game])
    for level in range(levels):
        r = ok(k, f"p = plan(step, {state}, is_goal, actions=CLICKS if 'CLICKS' in globals() else None)\n"
                  "result = [p['found'], p['length'], p['reason']]" if game != "zc01" else
                  "CLICKS = [{'action': 'MOUSE', 'row': int(o.center[0]), 'col': int(o.center[1])} "
                  "for o in objects() if o.color != 5 and o.top > 1 and o.bottom < 62]\n"
                  f"p = plan(step, {state}, is_goal, actions=CLICKS)\nresult = [p['found'], p['length'], p['reason']]")
        assert r.result[:2] == [True, BASELINES[game][level]], r.result
        r = ok(k, "print(explore(3))")
        assert r.actions and len(r.actions) <= 3
        if k.session.obs.levels_completed == level:
            r = ok(k, f"p = plan(step, {state}, is_goal, actions=CLICKS if 'CLICKS' in globals() else None)\n"
                      "print(p)\naction(p['actions'])")
            assert r.actions, r.stdout
        assert k.session.obs.levels_completed == level + 1, r.stdout
    assert k.session.obs.state == "WIN"
    r = ok(k, "c = check(step, encode, level='all', is_goal=is_goal)\nprint(c)\n"
              "result = {x: c[x] for x in ('ok', 'compared', 'exact', 'unpredicted', 'goal_hits', 'level_ups')}")
    res = r.result
    rec = read_record(path)
    played = [a for a in rec.actions]
    assert res["ok"] and res["exact"] == res["compared"] > 0, r.stdout
    assert res["goal_hits"] == res["level_ups"] == levels
    assert res["compared"] + res["unpredicted"] + levels == len(played)  # no RESET in these plays
    assert any(a["info"].get("explore") for a in played)  # the explorer's actions are in the record


def test_check_reports_a_wrong_simulator_compactly(tools_kernel):
    k, _ = tools_kernel("zb01")
    ok(k, GRID["zb01"])
    ok(k, "action(['RIGHT', 'RIGHT', 'UP'])")  # two steps right, then a bump into the wall above
    # Wrong: the piece moves two cells.
    r = ok(k, "def wrong(g, a):\n    return step(step(g, a), a)\nprint(check(wrong, encode))\n"
              "print(check(step, encode))")
    lines = r.stdout.splitlines()
    assert lines[0] == "check: 2 of 3 transitions predicted exactly (level 1)"
    assert lines[1].startswith("mismatch at transition 0 (step 1) RIGHT: ") and "(before | predicted | actual)" in lines[1]
    assert "check: 3 of 3 transitions predicted exactly (level 1)" in r.stdout
    # An abstract state: the fields that differ are named.
    r = ok(k, "def pos(f):\n    import numpy as np\n    rows, cols = np.nonzero(f.grid[:62] == 9)\n"
              "    return {'row': int(rows.min()), 'col': int(cols.min())}\n"
              "def stay(s, a):\n    return dict(s)\nprint(check(stay, pos))")
    assert "mismatch at transition 0 (step 1) RIGHT: differs at ['col'] predicted 14, actual 20" in r.stdout
    # A simulator that raises is reported, not fatal.
    r = ok(k, "def broken(s, a):\n    return s[5]\nprint(check(broken, pos))")
    assert "step raised KeyError: 5" in r.stdout


def test_plan_says_why_it_found_nothing(tools_kernel):
    k, _ = tools_kernel("zb01")
    ok(k, GRID["zb01"])
    r = ok(k, "print(plan(step, encode(current_frame), lambda g: False, max_states=50))")
    assert r.stdout.startswith("not found (state budget of 50 spent)")
    r = ok(k, "print(plan(step, encode(current_frame), lambda g: False))")
    assert "not found (no goal reachable: all" in r.stdout
    r = ok(k, "def bad(s, a):\n    raise ValueError('no rule yet')\nprint(plan(bad, 0, lambda s: False))")
    assert "the simulator raised on every action from the start" in r.stdout and "ValueError: no rule yet" in r.stdout
    r = ok(k, "def slow(s, a):\n    return s + 1 + 0 * sum(range(20000))\n"
              "print(plan(slow, 0, lambda s: False, actions=['UP'], max_seconds=0.2, max_states=10**9))")
    assert "not found (time budget of 0.2s spent)" in r.stdout
    # a step that edits its input in place fails loudly instead of corrupting the search
    r = ok(k, "def inplace(g, a):\n    g[0, 0] = 1\n    return g\nprint(plan(inplace, current_frame.grid.copy(), "
              "lambda g: False))")
    assert "read-only" in r.stdout


def test_explore_plays_through_the_host_and_stops_at_a_level(tools_kernel):
    k, path = tools_kernel("zc01")
    r = ok(k, "e = explore(8)\nprint(e)\nresult = e['actions']")
    rec = read_record(path)
    assert r.actions == r.result == [display for display in r.result]
    assert [a["info"]["explore"] for a in rec.actions] == [True] * len(r.actions)
    assert 1 <= len(r.actions) <= 8
    if k.session.obs.levels_completed:  # the explorer cleared level 1: it stopped there
        assert "stop: level_completed" in r.stdout and "completed the level" in r.stdout
    else:
        assert len(r.actions) == 8
    # the worker's history has the explorer's boards, as after any action
    r = ok(k, "result = [len(transitions), current_frame.step, last_action_result['executed_count']]")
    assert r.result == [len(rec.actions), len(rec.actions), len(rec.actions)]
    # actions after a level change in the same call are refused, as after a batch
    if k.session.obs.levels_completed:
        r = ok(k, "print(explore(2)['actions'])")
        assert r.actions  # a new call: it plays on level 2


def test_explore_without_an_explorer_and_bad_arguments(make_kernel):
    k = make_kernel("zs01", tools=True)
    r = k.run("explore(3)")
    assert r.kind == "error" and "explore() is not available" in r.error and not r.actions
    r = k.run("explore(0)")
    assert r.kind == "error" and "1 to 100" in r.error


def test_tools_are_off_unless_asked(make_kernel):
    k = make_kernel("zs01")
    assert k.run("print('plan' in globals(), 'objects' in globals())").stdout == "False False\n"


def test_the_simulator_is_kept_in_the_notes_and_restored_after_a_restart(tools_kernel):
    k, _ = tools_kernel("zb01")
    ok(k, GRID["zb01"])
    r = ok(k, "print(check(step, encode, is_goal=is_goal))")
    assert "kept in notes['simulator']: step, encode, is_goal, MOVES" in r.stdout
    assert "def step(g, a)" in k.notes["simulator"] and "import numpy as np" in k.notes["simulator"]
    r = k.run("import os\nos._exit(1)")
    assert r.kind == "crash" and r.restarted
    r = ok(k, "p = plan(step, encode(current_frame), is_goal)\nresult = [p['found'], p['length']]")
    assert r.result == [True, 13]  # step, encode and is_goal are back, with MOVES and numpy
    assert json.dumps(k.notes)  # the notes dict stays JSON


def test_the_plan_benchmark_prints_its_figures_and_clears_the_bar(capsys):
    from devkit.bench.plan import main
    assert main(["--states", "20000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["states"] == 20000 and out["reason"] == "state budget of 20000 spent"
    assert out["expansions_per_s"] >= 20_000 and out["seconds"] > 0
