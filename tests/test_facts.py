"""Facts that are true (issue 36): the object facts of a change survive a resize, a split and a
merge, the HUD border is summarised apart, and `duck bench facts` proves every fact
of every action and call true of its boards (here on the bundled games and a model's run; over
the 25 public games in experiments/LOG.md). The checker itself is shown to catch each kind of
false fact, the ones the review found included."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import BUNDLED, ROOT
from devkit.bench import facts
from devkit.bench.facts_check import Boards, check_animation_line, check_change, check_parts
from duck.game.animation import change_parts, summarize_animation
from duck.game.change import Step
from duck.game.frames import Frame

ENGINE = ROOT / "tests" / "fixtures" / "engine_games"


def board() -> np.ndarray:
    g = np.full((64, 64), 5, dtype=np.int8)
    g[63, :] = 0  # a white step bar along the bottom (su15's)
    return g


def test_a_bar_that_shrinks_is_resized_and_the_hud_is_apart():
    """The review: su15's step bar going from 64 to 62 white cells read "vanished: W64px at
    (63,0)"; a 9-cell move plus the bar read "rows 52-63, cols 3-63"."""
    before = board()
    before[52:55, 10:13] = 11  # a yellow 3x3 piece
    after = board()
    after[63, 62:] = 5
    after[52:55, 13:16] = 11
    assert change_parts(before, after) == [
        "18 cells changed in rows 52-54, cols 10-15", "moved: Y9px (52,10)->(52,13)",
        "large regions (over 256 cells) changed: B", "HUD: 2 cells changed, W 64 -> 62 cells, B 896 -> 898 cells"]
    small = before.copy()
    small[20, 20:30] = 9  # a blue bar of 10
    smaller = small.copy()
    smaller[20, 27:30] = 5
    assert change_parts(small, smaller) == ["3 cells changed in rows 20, cols 27-29".replace("rows", "row"),
                                            "resized: b10px at (20,20) -> b7px at (20,20)",
                                            "large regions (over 256 cells) changed: B"]
    cut = small.copy()
    cut[20, 24] = 5
    assert "split: b10px at (20,20) -> b4px at (20,20) + b5px at (20,25)" in change_parts(small, cut)
    assert "merged: b4px at (20,20) + b5px at (20,25) -> b10px at (20,20)" in change_parts(cut, small)
    red = np.where(small == 9, 8, small).astype(np.int8)
    assert "recoloured: b10px at (20,20) -> R" in change_parts(small, red)
    gone = small.copy()
    gone[20, 20:30] = 5
    assert "vanished: b10px at (20,20)" in change_parts(small, gone)
    assert "appeared: b10px at (20,20)" in change_parts(gone, small)
    for a, b in ((before, after), (small, smaller), (small, cut), (cut, small), (small, red), (small, gone)):
        assert all(c.ok for c in check_change("; ".join(change_parts(a, b)), a, [b]))


def test_the_checker_catches_every_kind_of_false_fact():
    before = board()
    before[52:55, 10:13] = 11
    after = board()
    after[63, 62:] = 5
    after[52:55, 13:16] = 11
    b = Boards(before, after)
    true = ["18 cells changed in rows 52-54, cols 10-15", "moved: Y9px (52,10)->(52,13)",
            "HUD: 2 cells changed, W 64 -> 62 cells", "large regions (over 256 cells) changed: B"]
    assert [c.ok for c in check_parts(b, true)] == [True] * 4
    false = ["vanished: W64px at (63,0)",  # the review's: the bar only shrank
             "20 cells changed in rows 52-63, cols 10-63",  # the HUD mixed into the box and the count
             "moved: Y9px (52,10)->(52,14)", "appeared: W62px at (63,0)",  # white was there in all its cells
             "resized: W64px at (63,0) -> W61px at (63,0)", "split: W64px at (63,0) -> W62px at (63,0)",
             "HUD: 2 cells changed, W 64 -> 63 cells", "large regions (over 256 cells) changed: Y",
             "recoloured: Y9px at (52,10) -> R", "only the HUD border changed (the outer 4 rows and columns)",
             "the cup is full"]
    got = check_parts(b, false)
    assert [c.ok for c in got] == [False] * len(false), [(c.text, c.ok) for c in got]
    assert got[-1].kind == "unknown"  # a part not understood is false: no new kind slips past
    assert [c.ok for c in check_parts(b, ["resized: W64px at (63,0) -> W62px at (63,0)"])] == [True]
    half = after[:32, :32]  # a board that changed size: only "changed size" is true of it
    assert [c.ok for c in check_change("the board changed size (64x64 -> 32x32)", before, [half])] == [True]
    assert [c.ok for c in check_change("no cell changed", before, [half])] == [False]
    # a level-up's facts must be of the board that completed the level, not the next level's
    won = after.copy()
    won[30:34, 30:34] = 9
    nxt = np.full((64, 64), 3, dtype=np.int8)
    frames = [won, nxt]
    text = summarize_animation(Frame(before, level=1), [Frame(f, level=2) for f in frames])
    assert text.startswith("2 frames; level 1 completed: facts up to frame 1 of 2, the board that completed it "
                           "(frame 2 is level 2's first board); 34 cells changed")
    assert all(c.ok for c in check_change(text, before, frames, 1, True))
    old = summarize_animation(before, frames)  # no levels: described against the next level's first board
    assert not all(c.ok for c in check_change(old, before, frames, 1, True))
    line = "2 frames over 1 action; 1 animated (longest 2 frames); no in-between frame shows anything the final board lost"
    step = Step("SPACE", before, (won, nxt), "NOT_FINISHED", 1)
    assert [c.ok for c in check_animation_line(line, [step], 0)] == [True, False, True]  # the level-up is not named


def test_every_fact_of_the_bundled_games_is_true(capsys):
    """CI's run of the checker: the explorer on the bundled games and zv01 (a level won by an
    animated action), every action's kernel summary and every call's facts."""
    for games in (BUNDLED, ENGINE):
        assert facts.main(["--games", str(games), "--policy", "explorer", "--max-actions", "60"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["false"] == {} and doc["false_total"] == 0, doc["examples"]
        assert doc["claims"].get("moved", 0) + doc["claims"].get("resized", 0) + doc["claims"].get("recoloured", 0) > 0
    assert doc["claims"]["level_up"] >= 2 and doc["claims"]["mid_animation"] >= 1


def test_every_fact_of_a_model_run_is_true(tmp_path, capsys):
    """A model's records group the actions by its calls (a batch is one turn's net change)."""
    from duck.config import load_config
    from duck.run import play_folder
    from devkit.stub.models import SolutionModel
    from devkit.stub.server import StubServer
    with StubServer(SolutionModel(BUNDLED)) as url:
        cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null", "play.policy=llm",
                                     f'model.urls=["{url}"]'])
        play_folder(BUNDLED, tmp_path / "run", cfg)
    assert facts.main(["--records", str(tmp_path / "run")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"] == 3 and doc["false_total"] == 0, doc["examples"]
    assert doc["claims"]["level_up"] >= 4  # zc01's and zs01's level-ups, in the kernel's text and the turn's


def test_bad_input_is_one_line(tmp_path, capsys):
    assert facts.main(["--records", str(tmp_path)]) == 2
    assert json.loads(capsys.readouterr().out) == {"error": f"no records under {tmp_path}"}
    assert facts.main(["--games", str(tmp_path)]) == 2
    assert "no games under" in json.loads(capsys.readouterr().out)["error"]
    torn = tmp_path / "records"
    torn.mkdir()
    (torn / "g.jsonl").write_text('{"type":"header","game_id":"g"}\n{"type":"act')  # no board, a torn line
    (torn / "h.jsonl").write_bytes(b"\x00garbage")  # no header at all
    assert facts.main(["--records", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["claims"] == {} and doc["records"] == 1 and list(doc["unreadable"]) == ["h.jsonl"]


@pytest.mark.public
def test_every_fact_of_the_public_games_is_true(public, capsys):
    """The issue's figure at a smaller size (the 25 games at 150 actions: experiments/LOG.md)."""
    assert facts.main(["--games", str(public), "--policy", "explorer", "--max-actions", "40",
                       "--only", "ls20,su15,sp80,tn36"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"] == 4 and doc["false_total"] == 0, doc["examples"]
