"""Memory across levels (duck.agent.memory): per solved level its actions, the winning attempt's
tail and the rule the model states once; shown on the first turn of every later level and kept
through a trim of old turns (right after the system prompt)."""

from __future__ import annotations

import json

from conftest import BUNDLED
from duck.agent.loop import AgentPolicy
from duck.agent.memory import LevelMemory, parse_rule
from duck.config import load_config
from duck.game.source import GameSource
from duck.play.session import play_game
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer

LEVELS = ["action(['DOWN', 'LEFT', 'UP', 'RIGHT'])", "action(['RIGHT', 'DOWN', 'LEFT', 'DOWN', 'RIGHT', 'UP'])",
          "action(['DOWN', 'RIGHT', 'UP', 'RIGHT', 'UP', 'RIGHT', 'UP', 'LEFT'])"]  # zs01's solution.json


def test_parse_rule():
    assert parse_rule("Thinking...\n**Rule:** slide onto the green cell.\n\nNext I will") == "slide onto the green cell."
    assert parse_rule("- Rule of level 2: a\nb\nc\nd\ne\nf\ng") == "a\nb\nc\nd\ne"  # at most 5 lines
    assert parse_rule("Rule: first\n\nRule: second") == "second"  # the last one stated
    assert parse_rule("The rule is unclear.") == "" and parse_rule("") == ""


def test_memory_keeps_attempts_tail_and_the_rule_asked_once():
    m = LevelMemory(tail=3)
    m.played(["UP", "LEFT"])
    m.game_over()
    m.played(["RESET", "DOWN", "DOWN", "RIGHT", "UP"])
    s = m.level_done(1, 9)
    assert (s.actions, s.game_overs, s.attempt, s.tail) == (9, 1, 4, ["DOWN", "RIGHT", "UP"])
    assert m.asking == 1 and not m.from_reply("no rule here", "nor here")
    assert m.from_reply("", "Rule: push the box\nonto the cross") and m.asking is None
    assert m.block() == ("Solved levels:\n- Level 1: solved in 9 actions (1 GAME_OVER); the winning attempt's last 3 "
                         "of 4 actions: DOWN, RIGHT, UP.\n  Your rule: push the box\n  onto the cross")
    assert m.carry() == {"role": "user", "content": m.block()}
    assert LevelMemory().carry() == {"role": "user", "content": "Solved levels: none yet."}  # (the review: it was absent)


def _play(replies, tmp_path, *more):
    model = FixedModel(replies)
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null",
                                 "agent.failures_before_fallback=1", *more])
    with StubServer(model) as url:
        policy = AgentPolicy(0, cfg, model_url=url)
        play_game(source, game_id, policy, max_actions=100, record_path=tmp_path / "r.jsonl")
    return model.requests, policy


def _text(m) -> str:
    c = m["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


def test_the_rule_and_tail_reach_later_levels(tmp_path):
    replies = [{"content": "go", "code": LEVELS[0]},
               {"content": "Rule: slide into the green cell.", "code": LEVELS[1]},
               {"content": "go", "code": "print(1)"}]
    seen, policy = _play(replies, tmp_path)
    level_2, level_3 = _text(seen[1]["messages"][-1]), _text(seen[2]["messages"][-1])
    assert "State its rule once" in level_2 and "- Level 1: solved in 4 actions;" in level_2
    assert "Your rule" not in level_2  # not stated yet
    assert ("- Level 1: solved in 4 actions; the winning attempt's 4 actions: DOWN, LEFT, UP, RIGHT.\n"
            "  Your rule: slide into the green cell.\n- Level 2: solved in 6 actions") in level_3
    assert "State its rule once, in at most 5 lines, in the text of your reply, starting with \"Rule:\"." in level_3
    assert [s.rule for s in policy.memory.solved] == ["slide into the green cell.", ""]


def test_the_memory_survives_a_trim_right_after_the_system_prompt(tmp_path):
    reasoning = "r" * 6000
    replies = [{"content": "go", "code": LEVELS[0]}, {"content": "Rule: slide to green.", "code": LEVELS[1]}]
    replies += [{"content": "look", "reasoning": reasoning, "code": "action('DOWN')"} for _ in range(6)]
    seen, policy = _play(replies, tmp_path, "agent.context_tokens=9000", "model.max_output_tokens=500")
    assert policy.ctx.evictions >= 1
    trimmed = [b["messages"] for b in seen if "Level 1" not in json.dumps(b["messages"][2:])]
    assert trimmed, "no request after the first levels' turns were trimmed"
    after_system = _text(trimmed[-1][1])
    assert after_system.startswith("To fit the context, the first ") and "`dir()` lists them" in after_system
    assert "- Level 1: solved in 4 actions" in after_system and "Your rule: slide to green." in after_system
