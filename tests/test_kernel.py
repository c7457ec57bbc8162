"""duck.sandbox.host: the game variables, action(), deltas, records, and the Duck-compatible mode."""

from __future__ import annotations

import json

from duck.game.actions import Action
from duck.play.record import read_record
from conftest import alive

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
    r = k.run("a = action('DOWN')\nb = action('UNDO')\nprint(a['animation'])\nprint(len(last_animation), b['action_display'])")
    assert r.kind == "ok", r.text
    summary, tail = r.stdout.splitlines()
    assert "frame" in summary and ("moved" in summary or "changed" in summary)
    assert tail.endswith("UNDO")
    assert k.run("print(action('RESET')['action_display'])").stdout.strip() == "RESET"


def test_host_actions_reach_the_kernel_as_deltas(make_kernel):
    k = make_kernel()
    k.run("pass")
    k.act(Action(2))
    k.act(Action(3))
    assert k._delta(k.synced)[0]["entries"][0]["a"] == "DOWN"
    r = k.run("print(len(history), last_action, [h.frame.step for h in history])")
    assert r.stdout.strip() == "3 LEFT [0, 1, 2]"
    assert k._delta(k.synced)[0]["entries"] == []


def test_message_shapes(make_kernel):
    k = make_kernel()
    m = k.run("result = {'a': (1, 2), 'b': {3}}").message
    assert m == {"tool": "python", "returncode": 0, "result": {"a": [1, 2], "b": [3]}}
    m = k.run("print('hi')\naction('DOWN')").message
    assert m["stdout"] == "hi\n" and m["last_action_result"]["executed"] is True
    assert json.loads(k.run("print(1)").text)["stdout"] == "1\n"
    assert k.run("   ").message == {"error": "python requires a non-empty `code` string."}
    r = k.run("x = (")
    assert r.kind == "syntax" and "SyntaxError" in r.error


def test_notes_survive_a_restart(make_kernel):
    k = make_kernel()
    k.run("notes['goal'] = 'reach the blue tile'\nhelper = 1")
    r = k.run("import os\nos._exit(1)")
    assert r.kind == "crash" and r.restarted and "restarted" in r.message["error"]
    r = k.run("print(notes, 'helper' in globals())")
    assert r.stdout.strip() == "{'goal': 'reach the blue tile'} False"
    assert k.notes == {"goal": "reach the blue tile"}


def test_duck_compat_mode(make_kernel):
    k = make_kernel(compat=True, fresh=True)
    assert k.run("print(valid_actions)").stdout.strip() == "['UP', 'DOWN', 'LEFT', 'RIGHT', 'ACTION7']"
    r = k.run("print(action('ACTION7')['error'])")
    assert r.stdout.strip() == "Unknown action at index 1: 'ACTION7'"
    r = k.run("import numpy")
    assert r.message == {"tool": "python", "error": "Traceback (most recent call last):\n"
                         "  File \"<python_tool>\", line 1, in <module>\n"
                         "ImportError: Module 'numpy' is not allowed in the sandbox."}
    assert "NameError: __build_class__ not found" in k.run("class A: pass").error
    assert k.run("x = 1").kind == "ok" and "NameError" in k.run("print(x)").error  # fresh namespace
    assert k.run("x = (").message == {"error": "Python syntax error: '(' was never closed (<python_tool>, line 1)"}
    r = k.run("action('DOWN')")
    assert list(r.message) == ["tool", "returncode", "result"] and "animation" not in r.message["result"]
    r = k.run("print('a' * 5000)")
    assert r.message["stdout"].endswith("\n... [truncated 905 chars]") and r.message["truncated"] is True


def test_replay_cap_kills_or_stops(make_kernel):
    k = make_kernel(compat=True, fresh=True)
    r = k.run("action('DOWN')\nprint('after')\naction('LEFT')", max_actions=1, on_cap="kill")
    assert r.kind == "stopped" and r.actions == ["DOWN"]
    assert r.message == {"tool": "python", "error": "Tool timed out after 5s"}
    r = k.run("r = action(['LEFT', 'UP'])\nprint(r['stop_reason'], r['executed_count'])\n"
              "print(action('UP')['error'])", max_actions=1, on_cap="stop")
    assert r.stdout.splitlines() == ["stopped 1", "No action was executed because the current game "
                                     "state is terminal or stopping."]
    alive(k)
