"""What the model sees, end to end (issue 27): a scripted model drives the real agent on the real
kernel over HTTP; each turn message holds exactly the images the rules call for (the board; a
diff when the call changed the board inside the HUD border; after a GAME_OVER the fatal frame and
the last-alive -> fatal diff; the mid-animation frames that hold what the final board lost) and
the facts (the whole call's net change, the outcome in accurate words); the saved conversation
rebuilds every request bit for bit. The fixture games run in CI (zt01: a button whose animation
leaves the board as it was; zb01: a GAME_OVER; zs01: diffs and the level memory); the public
games with long animations (sp80, tn36, su15) replay the Duck's recorded actions (`public`)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED, ROOT
from duck.agent.loop import AgentPolicy
from duck.config import load_config
from duck.game.actions import Action
from duck.game.change import informative_frames
from duck.game.frames import grid_png
from duck.game.source import GameSource
from duck.paths import SHARED
from duck.play.conversation import read_conversation, record_of
from duck.play.record import read_record
from duck.play.session import play_game
from duck.testing.stub.models import FixedModel
from duck.testing.stub.server import StubServer
from duck.testing.stub.traces import load_trace

CLICKS = ROOT / "tests" / "fixtures" / "click_games"
TRACES = SHARED / "duck-traces"


def _play(games: Path, prefix: str, replies: list[dict], tmp_path: Path, *more: str, max_actions: int = 200):
    server = StubServer(FixedModel(replies), keep_prompts=True)
    source = GameSource.offline(games)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith(prefix))
    cfg = load_config(overrides=["model.retries=0", "model.backoff_s=0.01", "model.name=stub", "agent.fallback=null",
                                 "agent.failures_before_fallback=1", *more])
    path = tmp_path / "records" / f"{game_id}.jsonl"
    with server as url:
        play_game(source, game_id, AgentPolicy(0, cfg, model_url=url), max_actions=max_actions, record_path=path)
    conv_file = next((tmp_path / "conversations").glob(f"{game_id}.jsonl*"))
    return [p["messages"] for p in server.prompts], read_conversation(conv_file), read_record(path), conv_file


def _rebuilt_exactly(conv, conv_file, received) -> None:
    grids = dict(read_record(record_of(conv_file)).grids())
    assert [conv.request_messages(n, grids) for n in range(len(conv.requests)) if n not in conv.errors] == received


def _turns(conv, grids=None) -> list[dict]:
    """The turn messages (user messages with images) as sent."""
    return [conv.message(i, grids) for i, ln in sorted(conv.messages.items())
            if ln["message"]["role"] == "user" and isinstance(ln["message"]["content"], list)]


def _kinds(conv, msg_id: int) -> list[str]:
    parts = conv.messages[msg_id]["message"]["content"]
    return [("record" if "board" in p["image_url"] else p["image_url"]["render"]["kind"] + "@"
             + str(p["image_url"]["render"]["scale"])) for p in parts if p["type"] == "image_url"]


def _text(message: dict) -> str:
    return message["content"][-1]["text"]


def _png_grid_equal(url: str, grid: np.ndarray, scale: int) -> bool:
    return base64.b64decode(url.split(",", 1)[1]) == grid_png(grid, scale)


def _reply(code: str, content: str = "ok") -> dict:
    return {"content": content, "code": code}


def test_an_animation_that_leaves_the_board_as_it_was_is_shown_frame_by_frame(tmp_path):
    """zt01's run button: the piece walks and comes back; the final board equals the old one.
    The click is written as the turn text shows clicks (the review: it was refused)."""
    received, conv, rec, conv_file = _play(CLICKS, "zt01", [_reply("action('MOUSE(row=52, col=28)')"),
                                                             _reply("print(len(last_animation))")], tmp_path)
    assert rec.actions[0]["action"] == [6, 28, 52]  # the click ran: x = col 28, y = row 52
    _rebuilt_exactly(conv, conv_file, received)
    turn2 = [i for i, ln in sorted(conv.messages.items()) if ln.get("turn") == 1 and ln.get("level")][0]
    kinds = _kinds(conv, turn2)
    # the board (by record reference), no diff (nothing changed), four mid-animation frames at 4x
    assert kinds == ["record", "board@4", "board@4", "board@4", "board@4"], kinds
    text = _text(conv.message(turn2))
    assert "Net change of the board over the call: no cell changed." in text
    assert "seen only in between:" in text and "Images above, in order: 1. the board now (step 1); 2. mid-animation: " \
        "MOUSE(row=52, col=28), frame " in text
    # each shown frame is a real mid frame of that click, one that holds what the final board lost
    game = GameSource.offline(CLICKS).make(rec.game_id)
    before = game.reset().grid
    frames = game.step(Action.from_json(rec.actions[0]["action"])).frames
    good = informative_frames(before, frames)
    shown = [p["image_url"]["url"] for p in conv.message(turn2)["content"][1:] if p["type"] == "image_url"]
    assert len(good) >= 4 and all(any(_png_grid_equal(u, frames[i], 4) for i in good) for u in shown)
    # the acting call's tool message: one line of actions, none of the Duck's leftovers
    tool = next(m for m in received[1] if m["role"] == "tool")["content"]
    assert tool == "actions: 1 played: MOUSE(row=52, col=28); the next message shows the board"


def test_a_game_over_shows_the_fatal_frame_and_the_level_memory_follows(tmp_path):
    level_1 = "action(['RIGHT', 'RIGHT', 'DOWN', 'DOWN', 'DOWN', 'RIGHT', 'RIGHT', 'UP', 'UP', 'RIGHT', 'RIGHT', " \
              "'DOWN', 'DOWN'])"
    replies = [_reply("for a in ['UP'] * 18:\n    action(a)"),  # level 1 allows it: the move bar runs out
               _reply(level_1),
               _reply("action('DOWN')", content="Rule: walk the maze to the green cell\nbefore the bar empties\n\nx"),
               _reply("print(1)")]
    received, conv, rec, conv_file = _play(BUNDLED, "zb01", replies, tmp_path)
    _rebuilt_exactly(conv, conv_file, received)
    grids = dict(rec.grids())
    turns = _turns(conv, grids)
    after = turns[1]
    assert [p["type"] for p in after["content"]] == ["image_url"] * 3 + ["text"]  # images first, then the text
    fatal, last_alive = grids[18], grids[17]  # actions 1-18: UP x18; the 18th ended the game
    assert rec.actions[17]["state"] == "GAME_OVER" and rec.actions[18]["action"] == [0]
    urls = [p["image_url"]["url"] for p in after["content"][:3]]
    assert _png_grid_equal(urls[0], grids[19], 10)  # the board now: the level restarted
    assert _png_grid_equal(urls[1], fatal, 10)
    from duck.game.images import diff_png
    assert base64.b64decode(urls[2].split(",", 1)[1]) == diff_png(last_alive, fatal, 10)
    text = _text(after)
    assert "Outcome: GAME_OVER. Level restarted: one RESET was played for you (it counts as an action)" in text
    assert "2. the board at GAME_OVER (the fatal frame by UP); 3. the fatal frame with the cells changed by UP" in text
    assert "left in the budget" not in text and not text.endswith("The current board:")
    new_level = _text(turns[2])
    assert "Outcome: level 1 completed in 32 actions. This is level 2 of 2." in new_level
    assert 'State its rule once, in at most 5 lines, in the text of your reply, starting with "Rule:".' in new_level
    assert ("- Level 1: solved in 32 actions (1 GAME_OVER); the winning attempt's 13 actions: RIGHT x2, DOWN x3, "
            "RIGHT x2, UP x2, RIGHT x2, DOWN x2.") in new_level
    assert "Rule:" not in _text(turns[3])  # asked once, shown only on later levels' first turns
    rule = [ln for ln in conv.lines if ln.get("kind") == "level_rule"]
    assert rule and rule[0]["rule"] == "walk the maze to the green cell\nbefore the bar empties"


def test_a_batch_is_reported_by_its_net_change_with_a_diff_image(tmp_path):
    """The review: a batch was described by its last action only (a blocked final move that
    touched the HUD came out as the batch's change)."""
    received, conv, rec, conv_file = _play(BUNDLED, "zb01", [_reply("action(['RIGHT', 'RIGHT', 'UP'])"),
                                                             _reply("print(1)")], tmp_path)
    _rebuilt_exactly(conv, conv_file, received)
    turn = _turns(conv)[1]
    text = _text(turn)
    assert "Your last call played 3 actions: RIGHT x2, UP." in text
    change = next(ln for ln in text.splitlines() if ln.startswith("Net change"))
    assert "moved: " in change and "only the HUD border changed" not in change  # UP alone changed only the bar
    assert [_kinds(conv, i) for i, ln in conv.messages.items() if ln.get("turn") == 1 and ln.get("level")] == [
        ["record", "diff@10"]]


def test_every_frame_of_every_animation_of_a_batch_is_in_python(make_kernel):
    """Not only the last action's: `transitions[i].frames` holds each action's animation (no
    action is spent to look at them); `last_animation` is the last one's."""
    k = make_kernel("zs01")
    r = k.run("action(['DOWN', 'LEFT', 'LEFT'])\n"
              "print([len(t.frames) for t in transitions], len(last_animation))\n"
              "print(transitions[1].frames[-1] is transitions[1].after_frame, transitions[1].frames[0].grid[40, 40])")
    assert r.kind == "ok" and r.stdout.splitlines()[0] == "[3, 5, 1] 1", r.text
    game = GameSource.offline(BUNDLED).make(k.session.game.game_id)
    game.reset()
    game.step(Action(2))
    mid = game.step(Action(3)).frames[0]
    assert r.stdout.splitlines()[1] == f"True {mid[40, 40]}"


# --- the public games with long animations, replaying the Duck's recorded actions ------------

def _trace_replies(game: str, pass_: int, turns: int) -> list[dict]:
    out = []
    for t in load_trace(TRACES, game, pass_)[:turns]:
        acts = [a for c in t["calls"] for a in c.get("actions") or []]
        if acts:
            out.append(_reply(f"action({json.dumps(acts)})"))
    return out + [_reply("print(1)")]


@pytest.mark.public
@pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="duck-traces not present")
@pytest.mark.parametrize("game, pass_, turns", [("sp80", 4, 13), ("tn36", 0, 20), ("su15", 0, 18)])
def test_public_games_with_long_animations(public, tmp_path, game, pass_, turns):
    """Guards off, so that the Duck's recorded actions reach the same boards (its GAME_OVERs
    and level-ups). Every request is rebuilt bit for bit; every mid-animation image is a real
    mid frame of its call that holds what the final board lost; after each GAME_OVER the
    fatal frame and its diff are there."""
    replies = _trace_replies(game, pass_, turns)
    received, conv, rec, conv_file = _play(public, game, replies, tmp_path, "agent.guards=false")
    _rebuilt_exactly(conv, conv_file, received)
    source = GameSource.offline(public)
    g = source.make(rec.game_id)
    g.reset()
    frames_of: dict[int, tuple] = {}  # step -> (board before, frames) of each recorded action
    for a in rec.actions:
        before = g.obs.grid
        frames_of[a["i"]] = (before, g.step(Action.from_json(a["action"])).frames)
    mids = deaths = 0
    grids = dict(rec.grids())
    for i, ln in sorted(conv.messages.items()):
        if not ln.get("level") or ln.get("turn", 0) == 0:
            continue
        msg = conv.message(i, grids)
        kinds = _kinds(conv, i)
        text = _text(msg)
        urls = [p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url"]
        if "Outcome: GAME_OVER" in text:
            deaths += 1
            assert kinds[1:3] == ["board@10", "diff@10"]
        start = ln["actions_before"]
        prev_turn = max(j for j, m in conv.messages.items() if j < i and m.get("level"))
        call_steps = range(conv.messages[prev_turn]["actions_before"] + 1, start + 1)
        candidates = [frames_of[s][1][k] for s in call_steps if s in frames_of
                      for k in informative_frames(*frames_of[s])]
        shown = [u for u, k in zip(urls, kinds) if k == "board@4"]
        assert (1 <= len(shown) <= 4) if candidates else not shown  # those that show something new
        assert len(set(shown)) == len(shown) and all(any(_png_grid_equal(u, f, 4) for f in candidates) for u in shown)
        mids += len(shown)
    assert mids > 0
    if game in ("sp80", "su15"):
        assert deaths >= 1


def test_the_system_prompt_states_facts_and_its_switch():
    """The review: the prompt said a time-out loses the definitions (the kernel keeps them: only
    a restart of its process loses them); advice text goes (it lowered every score in the field)."""
    from duck.agent.turn import system_prompt
    cfg = load_config()
    text = system_prompt(cfg)
    assert "you are told that your definitions were lost" not in text
    assert f"A call is stopped after {cfg.kernel.call_timeout_s} seconds and the session keeps your definitions" in text
    for advice in ("## Playing well", "Prefer actions", "Spend actions where", "usually", "Keep a short written model"):
        assert advice not in text
    assert "'MOUSE(row=12, col=40)'" in text and "UNDO (the engine's ACTION7)" in text
    assert "From level 2 on" in text and "## Notes" not in text
    assert "Rule:" in text and "dimmed" in text and "`guard` when a guard stopped it" in text
    off = system_prompt(load_config(overrides=["agent.guards=false"]))
    assert "From level" not in off and "A batch stops after an action that changed nothing" not in off
    assert "`guard`" not in off and "dimmed" in off


def test_every_action_form_the_text_shows_is_accepted_and_bad_ones_get_one_line():
    from duck.sandbox.actions import parse
    shown = ["UP", "UNDO", "RESET", "MOUSE(row=12, col=40)", "mouse( col=40 , row=12 )", "CLICK(row=12, col=40)"]
    got, err = parse([{"action": a} for a in shown] + [{"action": "MOUSE", "row": 12, "col": 40}])
    assert err is None and [str(a) for a in got] == ["UP", "UNDO", "RESET"] + ["CLICK 40 12"] * 4
    assert parse([{"action": "MOUSE(row=99999, col=-5)"}])[0][0] == Action.at(63, 0)  # clamped
    for bad in ("MOUSE(row=x, col=1)", "MOUSE(row=1)", "MOUSE(row=1, row=2)", "MOUSE(12, 40)"):
        got, err = parse([{"action": bad}])
        assert got == [] and err == f"Unknown action at index 1: {bad!r}"
