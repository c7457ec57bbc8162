"""Host-side guards (duck.sandbox.batch_guards) on the real kernel and the bundled games: a batch
stops after an action that changed nothing away from the HUD border; from level 2 a further
action of the same call is refused and the call ends, and model code cannot catch it; each
guard is one line in the tool message; the switches turn them off; replays take none."""

from __future__ import annotations

from duck.config import load_config
from devkit.replay.caps import ReplayKernel
from duck.sandbox import batch_guards
from duck.sandbox.batch_guards import Guards
from duck.sandbox.host import CallResult

LEVEL_1 = "action(['DOWN', 'LEFT', 'UP', 'RIGHT'])"  # zs01's level 1 (solution.json)


def _guarded(make_kernel, game: str, **kw):
    k = make_kernel(game, **kw)
    assert k.install_guards(Guards())
    return k


def test_a_batch_stops_after_an_action_that_changed_only_the_hud(make_kernel):
    k = _guarded(make_kernel, "zb01")  # zb01: UP bumps the wall; only the move bar (rows 62-63) changes
    r = k.run("r = action(['UP', 'RIGHT', 'RIGHT'])\nprint(r['executed_actions'], r['stop_reason'])")
    assert r.kind == "ok" and r.actions == ["UP"] and "['UP'] no_effect" in r.stdout
    assert r.action_results[-1]["guard"] == ("guard: UP (action 1 of this call) changed nothing away from the HUD "
                                             "border, so the 2 later actions of its batch were not played")
    assert r.text.count("guard:") == 1 and "actions: 1 played: UP;" in r.text
    # on level 1 the same call may still act (probing): only from level 2 is it refused
    r = k.run("action(['UP', 'RIGHT'])\nr = action('RIGHT')\nprint(r['executed'])")
    assert r.actions == ["UP", "RIGHT"] and "True" in r.stdout


def test_from_level_2_no_action_follows_an_ineffective_one_and_code_cannot_catch_it(make_kernel):
    k = _guarded(make_kernel, "zs01")
    assert k.run(LEVEL_1).actions[-1] == "RIGHT" and k.session.obs.levels_completed == 1
    n = k.session.game.actions
    code = ("r = action('UP')\n"  # blocked on level 2's first board: nothing changes
            "try:\n    action('RIGHT')\nexcept Exception as e:\n    print('caught', e)\n"
            "print('after')")
    r = k.run(code)
    assert r.actions == ["UP"] and k.session.game.actions == n + 1  # RIGHT never reached the game
    assert r.kind == "stopped" and "caught" not in r.stdout and "after" not in r.stdout
    assert "\nguard: not played and the call ended: from level 2 on" in r.text and "timed out" not in r.text
    assert "actions: 1 played: UP;" in r.text and r.text.count("guard:") == 1
    # a bare except that swallows the stop gains nothing: every later request is refused too
    r = k.run("action('DOWN')\nfor _ in range(3):\n    try:\n        action('RIGHT')\n    except BaseException:\n"
              "        pass\nprint('went on')")
    assert r.actions == ["DOWN"] and "went on" in r.stdout and k.session.game.actions == n + 2
    assert k.run("action('RIGHT')").actions == ["RIGHT"]  # a new call acts again


def test_the_switch_turns_the_guards_off(make_kernel):
    k = make_kernel("zb01")
    assert not k.install_guards(Guards(stop_on_no_effect=False, block_from_level=0))
    assert k.host.guards is None
    r = k.run("action(['UP', 'RIGHT', 'RIGHT'])")
    assert r.actions == ["UP", "RIGHT", "RIGHT"] and "guard" not in r.text
    assert not batch_guards.from_config(load_config(overrides=["agent.guards=false"]).agent).active
    assert batch_guards.from_config(load_config().agent) == Guards()  # on by default


def test_replays_of_recorded_calls_take_no_guards(make_kernel):
    replay = make_kernel("zb01", kernel=ReplayKernel, caps=[])
    assert not replay.install_guards(Guards()) and replay.host.guards is None


def test_no_action_after_a_level_change_is_reported_in_one_line(make_kernel):
    k = _guarded(make_kernel, "zs01")
    r = k.run(LEVEL_1 + "\nr = action('RIGHT')\nprint(r['executed'])")
    assert r.actions == ["DOWN", "LEFT", "UP", "RIGHT"] and "False" in r.stdout
    lines = r.text.splitlines()
    assert "actions: 4 played: DOWN, LEFT, UP, RIGHT (the level was completed); the next message shows the board" in lines
    assert ("not played: an earlier action of this call completed a level; no further action in this call"
            in lines)


def test_guard_lines_reach_the_tool_message_from_the_results_data():
    r = CallResult("ok", actions=["UP"], action_results=[{"executed": True, "stop_reason": "no_effect", "guard": "guard: x"}])
    assert r.text == "actions: 1 played: UP; the next message shows the board\nguard: x"
