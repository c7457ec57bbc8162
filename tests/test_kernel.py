"""duck.sandbox.host: the game variables, action(), deltas, records, the tool message, restarts."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from duck.game.actions import Action
from duck.play.record import read_record
from duck.sandbox.host import Kernel
from conftest import ROOT

ZS01_LEVEL1 = ["DOWN", "LEFT", "UP", "RIGHT"]


def test_initial_variables(make_kernel):
    k = make_kernel()
    r = k.run("print(current_frame, latest_frame is current_frame, len(history), repr(history[0].action))\n"
              "print(previous_frame, last_action, last_action_frame, last_transition, transitions)\n"
              "print(last_action_result, valid_actions, current_frame.step, current_frame.level)\n"
              "print(current_frame.grid.shape, last_animation, notes)")
    assert r.kind == "ok", r.text
    lines = r.stdout.splitlines()
    assert lines[0] == "AsciiFrameView(level=1, step=0, shape=64x64) True 1 ''"
    assert lines[1] == "None None None None []"
    assert lines[2] == "{} ['UP', 'DOWN', 'LEFT', 'RIGHT', 'UNDO'] 0 1"
    assert lines[3] == "(64, 64) [] {}"


def test_definitions_persist_and_actions_refresh_variables(make_kernel):
    k = make_kernel()
    assert k.run("def where():\n    return current_frame.step\nx = 41").kind == "ok"
    r = k.run("r = action('DOWN')\nprint(x + 1, where(), len(history), last_action, r['action_num'])\n"
              "print(previous_frame.step, last_transition.after_frame is current_frame)")
    assert r.stdout.splitlines() == ["42 1 2 DOWN 1", "0 True"]
    r = k.run("action(['LEFT', {'action': 'up'}])\n"
              "print([t.result.get('action_num') for t in transitions], last_action_result['executed_actions'])")
    assert r.stdout.strip() == "[None, None, 3] ['LEFT', 'UP']"
    assert r.actions == ["LEFT", "UP"]
    rec = read_record(k.session.writer.path)
    assert [a["action"] for a in rec.actions] == [[2], [3], [1]]


def test_batch_stops_at_level_completion_then_refuses(make_kernel):
    k = make_kernel()
    r = k.run(f"r = action({ZS01_LEVEL1 + ['DOWN']!r})\nr2 = action('DOWN')\n"
              "print(r['executed_count'], r['requested_count'], r['stopped_early'], r['stop_reason'], r['level'])\n"
              "print(r2['executed'], r2['stop_reason'])")
    assert r.stdout.splitlines() == ["4 5 True level_completed 2", "False previous_level_completed"]
    assert r.action_results[0]["level_completed"] and r.action_results[0]["reward"] == 1 / 3
    assert k.session.game.levels == 1


def test_valid_actions_come_back_in_the_call_after_a_refused_one(make_kernel):
    """Issue 40's finding: after a `previous_...` result (an action refused because an earlier
    one of the call completed the level) the worker's `valid_actions` stayed [] in the calls
    that followed, until a new board reached it."""
    k = make_kernel()
    r = k.run(f"action({ZS01_LEVEL1!r})\nprint(action('DOWN')['stop_reason'], valid_actions)")
    assert r.stdout.split()[0] == "previous_level_completed"
    r = k.run("print(valid_actions)")
    assert r.stdout.strip() == "['UP', 'DOWN', 'LEFT', 'RIGHT', 'UNDO']", r.text


def test_errors_for_bad_actions(make_kernel):
    k = make_kernel("zc01")
    r = k.run("print(action('UP')['error'])\nprint(action('JUMP')['error'])\n"
              "print(action({'action': 'MOUSE', 'row': 'a'})['error'])\n"
              "print(action({'action': 'MOUSE', 'row': 99, 'col': -5})['action_display'])")
    assert r.stdout.splitlines() == ["UP is not valid right now.", "Unknown action at index 1: 'JUMP'",
                                     "MOUSE action at index 1 requires integer row and col arguments.",
                                     "MOUSE(row=63, col=0)"]
    assert k.session.game.actions == 1
    r = k.run("action([])")
    assert r.kind == "error" and "requires at least one action" in r.error
    r = k.run("action({'action': 'MOUSE', 'x': 1, 'y': 2})")
    assert "legacy MOUSE x/y" in r.error


def test_undo_reset_and_animation_summary(make_kernel):
    k = make_kernel()
    r = k.run("a = action('DOWN')\nb = action('UNDO')\nprint(a['animation'])\n"
              "print(len(last_animation), b['action_display'])")
    assert r.kind == "ok", r.text
    summary, tail = r.stdout.splitlines()
    assert "frame" in summary and ("moved" in summary or "changed" in summary)
    assert tail.endswith("UNDO")
    assert k.run("print(action('RESET')['action_display'])").stdout.strip() == "RESET"


def test_host_actions_reach_the_kernel_as_deltas(make_kernel):
    """Actions the host takes itself show in the model's variables at its next call, appended
    to the history the worker already holds: the same objects, not a rebuilt history."""
    k = make_kernel()
    k.run("h0 = history[0]\nseg = current_frame.segmentation")
    k.act(Action(2))
    k.act(Action(3))
    r = k.run("print(len(history), last_action, [h.frame.step for h in history], previous_frame.step)\n"
              "print(history[0] is h0, history[0].frame.segmentation is seg)")
    assert r.stdout.splitlines() == ["3 LEFT [0, 1, 2] 1", "True True"]


def test_the_tool_message_is_rendered_once_from_the_results_data(make_kernel):
    k = make_kernel()
    assert k.run("result = {'a': (1, 2), 'b': {3}}").text == 'result: {"a": [1, 2], "b": [3]}'
    r = k.run("print('hi')\naction('DOWN')")
    assert r.text == "stdout:\nhi\nactions: 1 played: DOWN; the next message shows the board"
    assert r.action_results[-1]["executed"] is True and r.stdout == "hi\n"
    assert k.run("   ").text == "error: python requires a non-empty `code` string."
    r = k.run("x = (")
    assert r.kind == "syntax" and "SyntaxError" in r.error and r.text.startswith("error:\n  File \"<cell-4>\"")
    assert k.run("pass").text == "(no output)"
    r = k.run("print('a' * 5000)")
    assert r.stdout_total == 5001 and "(printed 5001 characters; only the first and last parts are shown)" in r.text


def test_notes_survive_a_restart(make_kernel):
    k = make_kernel()
    k.run("notes['goal'] = 'reach the blue tile'\nhelper = 1")
    r = k.run("import os\nos._exit(1)")
    assert r.kind == "crash" and r.restarted and "restarted" in r.text
    r = k.run("print(notes, 'helper' in globals())")
    assert r.stdout.strip() == "{'goal': 'reach the blue tile'} False"
    assert k.notes == {"goal": "reach the blue tile"}


def test_our_tracebacks_show_the_snippet_not_the_sandbox(make_kernel):
    k = make_kernel()
    r = k.run("x = 1\naction([])")
    assert r.kind == "error" and r.error.splitlines() == [
        "Traceback (most recent call last):", '  File "<cell-1>", line 2, in <module>', "    action([])",
        "ValueError: action(actions) requires at least one action."]
    r = k.run("import json\njson.loads('{')")
    assert 'File "<cell-2>", line 2' in r.error and "json" in r.error.splitlines()[-3]


def test_the_ducks_recorded_names_still_play(make_kernel):
    """One dialect: the Duck's names (ACTION1-7, MOUSE with row and col) are ours too; ACTION7
    is UNDO, listed under that name."""
    k = make_kernel()
    r = k.run("action('ACTION2')\nprint(action('ACTION7')['action_display'], valid_actions[-1])")
    assert r.actions == ["DOWN", "UNDO"] and r.stdout == "UNDO UNDO\n"


def test_the_production_kernel_knows_no_replay_caps(make_kernel):
    """The trace replay's caps live in devkit.replay.caps (a kernel of its own); the sandbox
    has no hook for them and no second dialect, and a call plays every action it asks for."""
    assert set(inspect.signature(Kernel.run).parameters) == {"self", "code", "timeout_s", "info"}
    for f in Path(ROOT, "duck", "sandbox").rglob("*.py"):
        assert not re.search(r"max_actions|on_cap|RecordedCap|trace_caps|dialect|Gate\b|gate=", f.read_text()), f
    k = make_kernel()
    r = k.run("print(action(['DOWN', 'LEFT', 'UP'])['executed_count'])")
    assert r.actions == ["DOWN", "LEFT", "UP"] and r.stdout == "3\n"
