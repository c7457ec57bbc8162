"""Notes: one test per rule, on scripted model replies (visible text, reasoning, kernel dict)."""

from __future__ import annotations

from duck.agent.notes import SECTIONS, Notes, cap, parse_sections


def test_labels_in_visible_text_start_each_section():
    text = ("I moved the block.\n"
            "World model: a 3x3 grid of blue cells.\n"
            "Goal model: make every cell red\n(likely).\n"
            "Action model: a click flips a cell and its neighbours.\n"
            "Plan: click the centre, then the corners.\n"
            "Open questions: does UNDO exist?\n"
            "Cross-level notes: clicks flip neighbours.")
    got = parse_sections(text)
    assert list(got) == list(SECTIONS)
    assert got["Goal model"] == "make every cell red\n(likely)."
    assert got["World model"] == "a 3x3 grid of blue cells."


def test_markdown_variants_and_aliases_are_recognised():
    text = ("- **World model:** walls are grey\n"
            "## Plan: go left\n"
            "**Goal**: reach the yellow square\n"
            "* open questions (now): what is red?\n"
            "Recent findings: LEFT moved the player\n")
    got = parse_sections(text)
    assert got == {"World model": "walls are grey", "Plan": "go left", "Goal model": "reach the yellow square",
                   "Open questions": "what is red?"}  # "Recent findings" ends the previous section


def test_label_must_start_a_line():
    assert parse_sections("My plan: go left. The world model: unclear.") == {}


def test_reasoning_is_a_source_and_visible_text_wins():
    n = Notes()
    changed = n.from_reply(content="Plan: press UP twice.",
                           reasoning="Hmm.\nWorld model: a maze.\nPlan: press DOWN.")
    assert n.sections == {"World model": "a maze.", "Plan": "press UP twice."}
    assert set(changed) == {"World model", "Plan"}


def test_empty_or_missing_sections_keep_the_old_text():
    n = Notes()
    n.from_reply("World model: a maze.\nPlan: go left.", "")
    n.from_reply("Plan:\nWorld model: a maze with keys.", "")  # an empty Plan block
    n.from_reply("No labels at all this time.", "")
    assert n.sections == {"World model": "a maze with keys.", "Plan": "go left."}


def test_a_section_may_continue_after_a_blank_line():
    assert parse_sections("Plan:\n\n1. go left\n2. go up") == {"Plan": "1. go left\n2. go up"}


def test_kernel_dict_applies_only_changed_entries():
    n = Notes()
    n.from_kernel({"plan": "from python", "world_model": "a grid"})
    assert n.sections == {"Plan": "from python", "World model": "a grid"}
    n.from_reply("Plan: from the text", "")
    n.from_kernel({"plan": "from python", "world_model": "a grid"})  # unchanged: no overwrite
    assert n.sections["Plan"] == "from the text"
    n.from_kernel({"plan": "python again", "targets": [1, 2]})
    assert n.sections["Plan"] == "python again"
    assert n.extra == {"targets": "- 1\n- 2"}


def test_game_over_changes_nothing_unless_the_duck_rule_is_set():
    n = Notes()
    n.from_reply("World model: a maze.\nGoal model: reach Y.\nPlan: go left.\nCross-level notes: Y.", "")
    before = n.as_dict()
    n.after_turn(0, "GAME_OVER")
    assert n.as_dict() == before
    duck = Notes(keep_on_game_over=False)
    duck.from_reply("World model: a maze.\nCross-level notes: Y.", "")
    duck.after_turn(0, "GAME_OVER")
    assert duck.sections == {"Cross-level notes": "Y."}


def test_a_completed_level_carries_the_notes_or_wipes_them_under_the_duck_rule():
    n, duck = Notes(), Notes(carry_across_levels=False)
    for x in (n, duck):
        x.from_reply("World model: a maze.\nPlan: go left.\nCross-level notes: Y.", "")
        x.after_turn(1, "NOT_FINISHED")
        assert x.level == 2
    assert n.carried_from == {"Plan": 1} and set(n.sections) == {"World model", "Plan", "Cross-level notes"}
    assert duck.sections == {"Cross-level notes": "Y."}


def test_new_level_carries_all_and_marks_goal_and_plan_for_recheck():
    n = Notes()
    n.from_reply("World model: a maze.\nGoal model: reach Y.\nPlan: go left.\nCross-level notes: Y is the exit.", "")
    n.new_level(2)
    view = {v["name"]: v for v in n.view()}
    assert set(view) == {"World model", "Goal model", "Plan", "Cross-level notes"}
    assert view["Goal model"]["carried_from"] == 1 and view["Plan"]["carried_from"] == 1
    assert view["World model"]["carried_from"] is None
    n.new_level(3)  # still not rechecked: keeps the level it was written on
    assert {v["name"]: v for v in n.view()}["Plan"]["carried_from"] == 1
    n.from_reply("Plan: go right.", "")  # rewritten: the mark goes
    assert {v["name"]: v for v in n.view()}["Plan"]["carried_from"] is None
    assert {v["name"]: v for v in n.view()}["Goal model"]["carried_from"] == 1


def test_sections_are_capped_head_and_tail():
    n = Notes(limit=100)
    n.from_reply("World model: " + "a" * 300 + "END", "")
    text = n.sections["World model"]
    assert len(text) <= 100 and text.startswith("aaa") and text.endswith("END")
    assert cap("short", 10) == "short"


def test_view_order_is_fixed():
    n = Notes()
    n.from_reply("Plan: p\nWorld model: w", "")
    assert [v["name"] for v in n.view()] == ["World model", "Plan"]


def test_clear_is_the_ducks_wipe_for_the_ab_baseline():
    n = Notes()
    n.from_reply("World model: w\nPlan: p\nCross-level notes: c", "")
    n.from_kernel({"targets": [1]})
    n.clear()
    assert n.sections == {"Cross-level notes": "c"} and n.extra == {}


def test_a_note_from_the_thinking_stops_at_its_first_blank_line():
    """The review: a `Goal:` line in the thinking captured the next 900 characters of
    rambling, then shown every turn."""
    rambling = "Hmm, but maybe the yellow block is a key, or maybe not. " * 16
    thinking = f"Goal: reach the green cell\nwith the orange piece.\n\n{rambling}\n\nSo I will press RIGHT."
    n = Notes()
    assert n.from_reply("", thinking) == ["Goal model"]
    assert n.sections["Goal model"] == "reach the green cell\nwith the orange piece."
    old = Notes(stop_at_blank_line=False)  # the switch off (agent.notes_stop_at_blank_line): the old rule
    old.from_reply("", thinking)
    assert "maybe the yellow block" in old.sections["Goal model"]
    assert parse_sections("Plan:\n\n1. go left\n2. go up\n\nthen think", stop_at_blank_line=True) == {
        "Plan": "1. go left\n2. go up"}
