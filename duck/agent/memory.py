"""Memory across levels and GAME_OVER, and the level bookkeeping: per solved level what it took,
carried to later levels.

Per solved level: the actions it took (every attempt, RESETs included), its GAME_OVERs, the
last `tail` actions of the winning attempt and the rule the model is asked to state once, as a
`Rule:` block in its reply (prompts/memory.j2). It goes at the end of the first turn message of
every later level and, after a trim, under the trim line right after the system prompt
(duck.agent.context), so it never breaks the cached prefix. Why these, and where:
docs/agent.md, "The memory of solved levels".

`LevelMemory` is also the one owner of the level bookkeeping: where the current level began
(`start`, the game's action count then), its attempts and GAME_OVERs. The kernel is the other
memory: its namespace (the model's functions) and the model's `notes` dict, kept for the whole
game by the worker (the notes across restarts too), as the system prompt says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from duck.agent.turn import render
from duck.game.actions import compress

MEMORY_TAIL = 20  # actions of the winning attempt kept per solved level
RULE_LINES = 5
RULE_CHARS = 600
# "Rule:" at the start of a line, after list or heading marks, inside ** or __, maybe "Rule of level 2:".
_RULE = re.compile(r"^[ \t]*(?:[-*+>#]+[ \t]*)?(?:\*\*|__)?rule\b[^:\n]{0,24}:(?:\*\*|__)?[ \t]*",
                   re.IGNORECASE | re.MULTILINE)
_BLANK_LINE = re.compile(r"\n[ \t]*\r?\n")


def parse_rule(text: str) -> str:
    """The last `Rule:` block of `text`: up to its first blank line, at most RULE_LINES lines
    and RULE_CHARS characters; "" when there is none."""
    matches = list(_RULE.finditer(text or ""))
    if not matches:
        return ""
    body = text[matches[-1].end():].lstrip(" \t\r\n")
    if blank := _BLANK_LINE.search(body):
        body = body[:blank.start()]
    lines = [ln.rstrip() for ln in body.splitlines() if ln.strip()][:RULE_LINES]
    return "\n".join(lines).strip().strip("*_").strip()[:RULE_CHARS]


@dataclass
class Solved:
    level: int
    actions: int  # every action on the level, failed attempts and RESETs included
    game_overs: int
    attempt: int  # actions of the winning attempt
    tail: list[str]  # its last actions
    rule: str = ""

    @property
    def tail_text(self) -> str:
        return compress(self.tail)


@dataclass
class LevelMemory:
    tail: int = MEMORY_TAIL
    solved: list[Solved] = field(default_factory=list)
    start: int = 0  # the game's action count when the current level began
    attempt: list[str] = field(default_factory=list)  # the current attempt's actions
    game_overs: int = 0  # on the current level
    asking: int | None = None  # the level whose rule the current turn asks for

    def played(self, actions: list[str]) -> None:
        """A call's executed actions (display strings), in order; a RESET starts a new attempt."""
        for a in actions:
            self.attempt = [] if a == "RESET" else self.attempt + [a]

    def game_over(self) -> None:
        """The attempt ended in GAME_OVER (the RESET that follows starts the next one)."""
        self.game_overs += 1
        self.attempt = []

    def level_done(self, level: int, game_actions: int) -> Solved:
        """Level `level` was solved, the game being at `game_actions` actions; the next level
        begins there, and the next turn asks for the rule of this one."""
        s = Solved(level, game_actions - self.start, self.game_overs, len(self.attempt), self.attempt[-self.tail:])
        self.solved.append(s)
        self.attempt, self.game_overs, self.asking, self.start = [], 0, level, game_actions
        return s

    def from_reply(self, content: str, reasoning: str) -> bool:
        """Take the asked-for rule from a reply; True when it was stated."""
        if self.asking is None:
            return False
        rule = parse_rule(content) or parse_rule(reasoning)
        if not rule:
            return False
        for s in self.solved:
            if s.level == self.asking:
                s.rule = rule
        self.asking = None
        return True

    def end_turn(self) -> None:
        """The rule is asked for once: a turn that did not state it leaves it empty."""
        self.asking = None

    def block(self) -> str:
        """The memory as the model sees it (prompts/memory.j2): "none yet" before the first solved level."""
        return render("memory.j2", solved=self.solved)

    def carry(self) -> dict[str, Any]:
        """The message a context places right after its system prompt (after its trim line)
        when it trims old turns."""
        return {"role": "user", "content": self.block()}
