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
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED, ROOT
from duck.agent.loop import AgentPolicy
from duck.config import load_config
from duck.game.actions import Action
from duck.game.change import changed_inside, informative_frames
from duck.game.frames import grid_png
from duck.game.source import GameSource
from duck.paths import SHARED
from duck.play.conversation import read_conversation, record_of
from duck.play.record import read_record
from duck.play.session import play_game
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer
from devkit.stub.traces import load_trace

CLICKS = ROOT / "tests" / "fixtures" / "click_games"
ENGINE = ROOT / "tests" / "fixtures" / "engine_games"
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
        "level 1, MOUSE(row=52, col=28), frame " in text
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
    # the fatal UP only emptied the move bar (the HUD border): no 402-token diff of grey (the review)
    assert [p["type"] for p in after["content"]] == ["image_url"] * 2 + ["text"]  # images first, then the text
    fatal, last_alive = grids[18], grids[17]  # actions 1-18: UP x18; the 18th ended the game
    assert rec.actions[17]["state"] == "GAME_OVER" and rec.actions[18]["action"] == [0]
    assert not changed_inside(last_alive, fatal)
    urls = [p["image_url"]["url"] for p in after["content"][:2]]
    assert _png_grid_equal(urls[0], grids[19], 10)  # the board now: the level restarted
    assert _png_grid_equal(urls[1], fatal, 10)
    text = _text(after)
    assert "Outcome: GAME_OVER. Level restarted: one RESET was played for you (it counts as an action)" in text
    assert text.endswith("Images above, in order: 1. the board now (step 19); 2. the board at GAME_OVER (the fatal "
                         "frame by UP).")
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
    # the actions are listed once, in the call's tool message right above the turn (the review:
    # the list came twice in a row)
    tool = next(m for m in received[1] if m["role"] == "tool")["content"]
    assert tool == "actions: 3 played: RIGHT x2, UP; the next message shows the board"
    assert "Your last call played 3 actions.\n" in text and "RIGHT x2" not in text
    change = next(ln for ln in text.splitlines() if ln.startswith("Net change"))
    assert "moved: " in change and "only the HUD border changed" not in change  # UP alone changed only the bar
    assert [_kinds(conv, i) for i, ln in conv.messages.items() if ln.get("turn") == 1 and ln.get("level")] == [
        ["record", "diff@10"]]


def test_the_first_turn_names_the_level_once(tmp_path):
    """The review: the first turn said "Level 1 of 2" twice."""
    received, conv, rec, conv_file = _play(BUNDLED, "zb01", [_reply("print(1)")], tmp_path, max_actions=1)
    first = received[0][-1]["content"][-1]["text"]
    assert first == ("No action played yet.\nStep 0. Level 1 of 2: 0 actions on this level.\n"
                     "Valid actions: UP, DOWN, LEFT, RIGHT.\n\nImages above, in order: 1. the board now (step 0).")


def test_a_guard_line_is_told_once_and_every_fact_collected_is_shown(tmp_path):
    """The review: turn.py said the turn shows the guard line, which only the tool message
    held (and CallFacts kept the guards for nothing). The tool message right above the turn
    carries it, once; every fact the call's facts hold reaches the turn's text or images."""
    import inspect
    from dataclasses import fields
    from duck.agent import turn
    received, conv, rec, conv_file = _play(BUNDLED, "zb01", [_reply("action(['UP', 'UP', 'RIGHT'])"),
                                                             _reply("print(1)")], tmp_path)
    tool = next(m for m in received[1] if m["role"] == "tool")["content"]
    guard = ("guard: UP (action 1 of this call) changed nothing away from the HUD border, so the 2 later actions of "
             "its batch were not played")
    assert tool == f"actions: 1 played: UP; the next message shows the board\n{guard}"
    assert sum(json.dumps(m).count("changed nothing away from the HUD border") for m in received[1][1:]) == 1
    used = (ROOT / "prompts" / "turn.j2").read_text() + inspect.getsource(turn.turn_images) + inspect.getsource(
        turn._action)
    assert [f.name for f in fields(turn.CallFacts) if not re.search(rf"\blast\.{f.name}\b", used)] == []


def test_the_turn_in_the_docs_is_what_the_stub_renders_from_a_run(tmp_path):
    """The review: the docs showed each image on its own line, while vLLM 0.33 detects the
    Qwen3.8 template's content format as `openai` and runs them together (the stub renders it
    so). docs/agent.md's example is the stub's rendering of this run, the tool message and the
    turn message after zs01's level 1."""
    from duck.llm.render import default_template
    if not default_template().real:
        pytest.skip("the Qwen3.8 chat template is not in ../shared")
    received, conv, rec, conv_file = _play(BUNDLED, "zs01", [_reply("action(['DOWN', 'LEFT', 'UP', 'RIGHT'])"),
                                                             _reply("print(1)")], tmp_path)
    text, _ = default_template().render(received[1])
    start = text.rindex("<|im_start|>user\n<tool_response>")
    end = text.index("<|im_end|>", text.rindex("Images above")) + len("<|im_end|>")
    doc = re.search(r"```\n(<\|im_start\|>user\n<tool_response>.*?)\n```", (ROOT / "docs" / "agent.md").read_text(),
                    re.DOTALL)
    assert doc and doc[1] == text[start:end]
    assert "<|vision_end|><|vision_start|>" in doc[1]


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


def _captions(text: str) -> list[str]:
    listed = text.rsplit("Images above, in order: ", 1)[1].rstrip(".")
    return [re.sub(r"^\d+\. ", "", c) for c in re.split(r"; (?=\d+\. )", listed)]


def _check_turns(games: Path, conv, rec) -> dict[str, int]:
    """Every turn message after the first against the game replayed: after a level-up the board
    that completed the level (its action's last frame before the switch) at 10x, the net change
    and the animation line up to it; every mid-animation image a real mid frame of its call
    that holds what the board described lost (after a level-up: the board that completed it),
    captioned with its level, action and frame; after a GAME_OVER the fatal frame, and its diff
    only when the fatal action changed something away from the HUD border."""
    g = GameSource.offline(games).make(rec.game_id)
    g.reset()
    played: dict[int, tuple] = {}  # step -> (board before, frames, levels before) of each recorded action
    for a in rec.actions:
        before, levels = g.obs.grid, g.obs.levels_completed
        played[a["i"]] = (before, g.step(Action.from_json(a["action"])).frames, levels)
    seen = {"mids": 0, "deaths": 0, "level_ups": 0}
    grids = dict(rec.grids())
    for i, ln in sorted(conv.messages.items()):
        if not ln.get("level") or ln.get("turn", 0) == 0:
            continue
        msg, kinds = conv.message(i, grids), _kinds(conv, i)
        text, urls = _text(msg), [p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url"]
        captions = _captions(text)
        assert len(captions) == len(urls)
        prev_turn = max(j for j, m in conv.messages.items() if j < i and m.get("level"))
        steps = [s for s in range(conv.messages[prev_turn]["actions_before"] + 1, ln["actions_before"] + 1)]
        won = [s for s in steps if rec.actions[s - 1]["levels"] > played[s][2] and rec.actions[s - 1]["state"] != "WIN"]
        if won and len(played[won[0]][1]) > 1:
            seen["level_ups"] += 1
            frames, level = played[won[0]][1], played[won[0]][2] + 1
            at = [k for k, c in enumerate(captions) if c.startswith(f"the board that completed level {level} (")]
            assert len(at) == 1 and kinds[at[0]] == "board@10" and _png_grid_equal(urls[at[0]], frames[-2], 10)
            assert captions[at[0]].endswith(f"frame {len(frames) - 1} of {len(frames)}; frame {len(frames)} is level "
                                            f"{level + 1}'s first board)")
            assert f"Net change of the board over the call, up to the board that completed level {level}: " in text
            assert f"completed level {level} at frame {len(frames) - 1} of {len(frames)}" in text
        if "Outcome: GAME_OVER" in text:
            seen["deaths"] += 1
            fatal = rec.actions[[s for s in steps if rec.actions[s - 1]["state"] == "GAME_OVER"][0] - 1]["i"]
            diff = changed_inside(played[fatal][0], played[fatal][1][-1])
            assert kinds[1:3 if diff else 2] == ["board@10", "diff@10"][:2 if diff else 1]
        candidates = [(s, k, f[k]) for s in steps for f in [played[s][1][:-1] if won and s == won[0] else played[s][1]]
                      for k in informative_frames(played[s][0], f)]
        shown = [(u, c) for u, k, c in zip(urls, kinds, captions) if k == "board@4"]
        assert (1 <= len(shown) <= 4) if candidates else not shown  # those that show something new
        assert len({u for u, _ in shown}) == len(shown)
        for u, c in shown:
            assert any(_png_grid_equal(u, f, 4) and c.startswith(f"mid-animation: level {ln['level'] - bool(won)}, ")
                       and c.endswith(f"frame {k + 1} of {len(played[s][1])}") for s, k, f in candidates), c
        seen["mids"] += len(shown)
    return seen


def test_the_level_up_turn_shows_the_board_that_completed_the_level(tmp_path):
    """The review: the winning action's frames end on the next level, so the board that
    completed the level was never shown, the mid frames were compared with the new level's
    board ("no in-between frame shows anything the final board lost") and captioned as if they
    were of the new level. zv01's pour: a splash mid-way, the cup turns blue, then level 2."""
    received, conv, rec, conv_file = _play(ENGINE, "zv01", [_reply("action('SPACE')"),
                                                            _reply("print(last_action_result['animation'])"),
                                                            _reply("print(1)")], tmp_path)
    _rebuilt_exactly(conv, conv_file, received)
    assert rec.actions[0]["levels"] == 1 and rec.actions[0]["frames"] == 7
    assert _check_turns(ENGINE, conv, rec) == {"mids": 1, "deaths": 0, "level_ups": 1}
    text = _text(_turns(conv, dict(rec.grids()))[1])
    assert ("Net change of the board over the call, up to the board that completed level 1: 64 cells changed in rows "
            "48-55, cols 12-19; recoloured: B64px at (48,12) -> b.\n") in text
    assert ("Animation: 7 frames over 1 action; 1 animated (longest 7 frames); the action completed level 1 at frame 6 "
            "of 7 (frame 7 is level 2's first board); seen only in between: rows 12-35, cols 20-43, frames 2-3 of 7.") in text
    assert text.endswith("Images above, in order: 1. the board now (step 1); 2. the board that completed level 1 "
                         "(SPACE, frame 6 of 7; frame 7 is level 2's first board); 3. mid-animation: level 1, SPACE, "
                         "frame 2 of 7.")
    tool = [m for m in received[2] if m["role"] == "tool"][-1]["content"]  # the kernel's own summary says the same
    assert tool.startswith("stdout:\n7 frames; level 1 completed: facts up to frame 6 of 7, the board that completed "
                           "it (frame 7 is level 2's first board); 64 cells changed in rows 48-55, cols 12-19; "
                           "recoloured: B64px at (48,12) -> b; seen only mid-animation: c in rows 12-35, cols 20-43 "
                           "(frames 2-3 of 7)"), tool


@pytest.mark.public
@pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="duck-traces not present")
@pytest.mark.parametrize("game, pass_, turns", [("sp80", 3, 17), ("tn36", 0, 20), ("su15", 0, 18)])
def test_public_games_with_long_animations(public, tmp_path, game, pass_, turns):
    """Guards off, so that the Duck's recorded actions reach the same boards (its GAME_OVERs
    and level-ups). Every request is rebuilt bit for bit; every turn shows what `_check_turns`
    asks: sp80's level 1 is won by a SPACE of 20 frames (the liquid filling both cups), su15's
    by a click of 14."""
    replies = _trace_replies(game, pass_, turns)
    received, conv, rec, conv_file = _play(public, game, replies, tmp_path, "agent.guards=false")
    _rebuilt_exactly(conv, conv_file, received)
    seen = _check_turns(public, conv, rec)
    assert seen["mids"] > 0
    if game in ("sp80", "su15"):
        assert seen["deaths"] >= 1 and seen["level_ups"] >= 1, seen


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
