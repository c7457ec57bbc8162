"""duck.game.actions: the one action vocabulary (the model's names, display strings, click order, compress)."""

from __future__ import annotations

import pytest

from duck.game.actions import MODEL_NAMES, Action, compress, display, display_name, parse_display

EVERY_ACTION = [Action(i) for i in (0, 1, 2, 3, 4, 5, 7)] + [Action.click(0, 63), Action.click(40, 12)]


def test_display_strings_are_the_ducks_and_read_back():
    assert [display(a) for a in EVERY_ACTION] == ["RESET", "UP", "DOWN", "LEFT", "RIGHT", "SPACE", "UNDO",
                                                   "MOUSE(row=63, col=0)", "MOUSE(row=12, col=40)"]
    assert all(parse_display(display(a)) == a for a in EVERY_ACTION)
    assert parse_display("ACTION7") == Action(7) and parse_display(" up ") == Action(1)
    assert parse_display("MOUSE(row=70, col=-2)") == Action.click(0, 63)  # clamped, as the traces need
    assert [display_name(display(a)) for a in EVERY_ACTION[-3:]] == ["UNDO", "MOUSE", "MOUSE"]
    for bad in ("JUMP", "MOUSE", "MOUSE(row=1)", ""):
        with pytest.raises(ValueError):
            parse_display(bad)


def test_clicks_are_row_then_col_for_the_model_and_x_y_for_the_engine():
    a = Action.at(row=12, col=40)
    assert (a.x, a.y) == (40, 12) and a.to_json() == [6, 40, 12] and str(a) == "CLICK 40 12"
    assert Action.at("7", 99.9) == Action.click(63, 7)
    with pytest.raises(ValueError):
        Action.at("a", 1)
    with pytest.raises(TypeError):
        Action.at(None, 1)


def test_the_model_names_list_and_accept_the_ducks_and_ours():
    available = [1, 2, 3, 4, 5, 6, 7]
    assert MODEL_NAMES.valid(available) == ["UP", "DOWN", "LEFT", "RIGHT", "SPACE", "MOUSE", "UNDO"]
    assert MODEL_NAMES.valid([0, 3]) == ["LEFT"]  # RESET is never listed
    for name, aid in [("undo", 7), ("ACTION7", 7), ("click", 6), (" mouse ", 6), ("action6", 6), ("action1", 1),
                      ("reset", 0), ("JUMP", None), ("ACTION8", None), (None, None)]:
        assert MODEL_NAMES.id(name) == aid, name


def test_compress_counts_runs_of_one_action():
    assert compress(["UP", "UP", "LEFT", "UP"]) == "UP x2, LEFT, UP"
    assert compress([]) == "" and compress(["MOUSE(row=1, col=2)"] * 3) == "MOUSE(row=1, col=2) x3"


def test_model_items_play_the_action_they_were_made_from():
    for a in EVERY_ACTION:
        item = MODEL_NAMES.item(a)
        if isinstance(item, dict):
            assert item == {"action": "MOUSE", "row": a.y, "col": a.x}
            assert Action.at(item["row"], item["col"]) == a
        else:
            assert Action(MODEL_NAMES.id(item)) == a
