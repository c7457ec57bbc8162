"""The model's working notes, carried from turn to turn, level to level, and past GAME_OVER.

Six sections: World model, Goal model, Action model, Plan, Open questions, Cross-level
notes. Three sources, applied in the order they were written within a call:

1. the reasoning (thinking text), for lines that start with a section label; a block ends at
   the next label or, with `stop_at_blank_line` (agent.notes_stop_at_blank_line, on), at its
   first blank line;
2. the visible text, same rule (it wins over the reasoning of the same call);
3. the kernel's `notes` dict, which the model's Python may write (`notes['Plan'] = ...`);
   only keys whose value changed since the last look are applied, so an old dict entry
   never overwrites a newer text note.

Rules (the Duck's notes were empty in 84% of its calls and wiped at every GAME_OVER and
level change): a section changes only when a source gives it new non-empty text; GAME_OVER
changes nothing; a new level keeps every section and marks Goal model and Plan as carried
from the previous level, to be rechecked quickly (the mark goes when they are rewritten).
`after_turn` applies those rules once per turn; with `carry_across_levels` /
`keep_on_game_over` off it wipes instead, as the Duck did (the A/B baseline:
agent.carry_notes_across_levels / agent.keep_notes_on_game_over set to false).
Each section is capped (head and tail kept) so the notes cannot eat the context.

The turn shows the notes only with `agent.notes_in_turn` (off: structured notes scored best
switched off in the field, FIELD §2) and on the first turn of a fresh context; they are kept
in the record and the conversation either way, and the kernel's `notes` dict stays the model's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from duck.config import AgentConfig

SECTIONS = ("World model", "Goal model", "Action model", "Plan", "Open questions", "Cross-level notes")
RECHECK_ON_NEW_LEVEL = ("Goal model", "Plan")

# Label spellings the model uses, normalised (lower case, single spaces) → section.
ALIASES = {
    "world model": "World model", "world": "World model",
    "goal model": "Goal model", "goal": "Goal model",
    "action model": "Action model", "actions model": "Action model",
    "plan": "Plan", "next plan": "Plan",
    "open questions": "Open questions", "open question": "Open questions",
    "questions": "Open questions",
    "cross-level notes": "Cross-level notes", "cross level notes": "Cross-level notes",
    "cross-level": "Cross-level notes", "crosslevel notes": "Cross-level notes",
}
# Labels that end a section without being one (the Duck's prompt suggested this one).
STOP_LABELS = ("recent findings", "findings", "observations", "summary", "next action")
# The kernel's copy of the model's simulator (duck.sandbox.tools.keep): shown as a pointer, not
# as code; the kernel keeps the text and defines it again after a restart.
SIMULATOR = "simulator"

_LABEL = "|".join(re.escape(k) for k in sorted([*ALIASES, *STOP_LABELS], key=len, reverse=True))
# A label at the start of a line, optionally after list/heading marks and inside ** or __.
_LINE = re.compile(
    rf"^[ \t]*(?:[-*+>#]+[ \t]*)?(?:\*\*|__)?({_LABEL})(?:\*\*|__)?[ \t]*(?:\([^)\n]*\))?[ \t]*"
    rf"(?:\*\*|__)?[ \t]*[:：][ \t]*(?:\*\*|__)?", re.IGNORECASE | re.MULTILINE)


def normalise(label: str) -> str:
    return re.sub(r"[\s_]+", " ", label.strip().lower())


_BLANK_LINE = re.compile(r"\n[ \t]*\r?\n")


def parse_sections(text: str, stop_at_blank_line: bool = False) -> dict[str, str]:
    """Section → text for every labelled block of `text`; a later block of the same
    section replaces an earlier one. Blocks run to the next label or the end, or with
    `stop_at_blank_line` to the first blank line after their first text (a `Goal:` line in
    the thinking once swallowed the next 900 characters of unrelated reasoning)."""
    out: dict[str, str] = {}
    if not text:
        return out
    matches = list(_LINE.finditer(text))
    for k, m in enumerate(matches):
        section = ALIASES.get(normalise(m.group(1)))
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        raw = text[m.end():end]
        if stop_at_blank_line:
            raw = raw.lstrip(" \t\r\n")
            if blank := _BLANK_LINE.search(raw):
                raw = raw[:blank.start()]
        body = _clean(raw)
        if section and body:
            out[section] = body
    return out


def _clean(body: str) -> str:
    lines = [ln.rstrip() for ln in body.strip().splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines).strip().strip("*_").strip()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return "\n".join(f"- {_text(v)}" for v in value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def cap(text: str, limit: int) -> str:
    """At most `limit` characters: two thirds head, one third tail."""
    if len(text) <= limit:
        return text
    head = (limit * 2) // 3
    return text[:head].rstrip() + " […] " + text[-(limit - head - 5):].lstrip()


def simulator_pointer(source: str) -> str:
    """One line for the kept simulator: what it defines and where to read it."""
    names = re.findall(r"^def (\w+)", source, re.MULTILINE)
    return (f"{len(source.splitlines())} lines defining {', '.join(names) or 'constants'}, kept in the kernel "
            "(print(notes['simulator']) to read it; it is defined again after a kernel restart)")


@dataclass
class Notes:
    limit: int = AgentConfig().note_section_chars  # the config's default: one place
    carry_across_levels: bool = True
    keep_on_game_over: bool = True
    stop_at_blank_line: bool = True  # agent.notes_stop_at_blank_line
    sections: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)  # other keys of the kernel's dict
    carried_from: dict[str, int] = field(default_factory=dict)  # section → level it was written on
    level: int = 1
    _kernel_seen: dict[str, str] = field(default_factory=dict)

    def set(self, section: str, text: str) -> bool:
        text = cap(text.strip(), self.limit)
        if not text or self.sections.get(section) == text:
            return False
        self.sections[section] = text
        self.carried_from.pop(section, None)
        return True

    def from_text(self, text: str) -> list[str]:
        """Apply the labelled blocks of visible text or reasoning; returns what changed."""
        return [s for s, body in parse_sections(text, self.stop_at_blank_line).items() if self.set(s, body)]

    def from_reply(self, content: str, reasoning: str) -> list[str]:
        changed = self.from_text(reasoning)
        changed += [s for s in self.from_text(content) if s not in changed]
        return changed

    def from_kernel(self, notes: dict[str, Any] | None) -> list[str]:
        """Apply the entries of the kernel's `notes` dict that changed since last time."""
        changed: list[str] = []
        for key, value in (notes or {}).items():
            text = _text(value)
            if self._kernel_seen.get(str(key)) == text:
                continue
            self._kernel_seen[str(key)] = text
            section = ALIASES.get(normalise(str(key)))
            if section:
                if self.set(section, text):
                    changed.append(section)
            elif text:
                self.extra[str(key)] = simulator_pointer(text) if key == SIMULATOR else cap(text, self.limit // 2)
                changed.append(str(key))
        return changed

    def new_level(self, level: int) -> None:
        """Carry everything to `level`; Goal model and Plan are marked for a recheck."""
        for section in RECHECK_ON_NEW_LEVEL:
            if section in self.sections:
                self.carried_from.setdefault(section, self.level)
        self.level = level

    def after_turn(self, levels_completed: int, state: str) -> None:
        """Apply what a turn ended with: a new level (carry, or the Duck's wipe) and GAME_OVER
        (nothing changes: it restarts the level, not the knowledge; or the Duck's wipe)."""
        if levels_completed + 1 > self.level:
            if self.carry_across_levels:
                self.new_level(levels_completed + 1)
            else:
                self.clear()
                self.level = levels_completed + 1
        if state == "GAME_OVER" and not self.keep_on_game_over:
            self.clear()

    def clear(self, keep: tuple[str, ...] = ("Cross-level notes",)) -> None:
        """The Duck's rule (A/B baseline): everything but `keep` is wiped."""
        self.sections = {k: v for k, v in self.sections.items() if k in keep}
        self.carried_from = {k: v for k, v in self.carried_from.items() if k in keep}
        self.extra = {}

    def view(self) -> list[dict[str, Any]]:
        """What the turn template renders: the six sections in order, then extra keys."""
        out = [{"name": s, "text": self.sections[s], "carried_from": self.carried_from.get(s)}
               for s in SECTIONS if s in self.sections]
        out += [{"name": k, "text": v, "carried_from": None} for k, v in sorted(self.extra.items())]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "sections": dict(self.sections), "extra": dict(self.extra),
                "carried_from": dict(self.carried_from)}

    def __bool__(self) -> bool:
        return bool(self.sections or self.extra)
