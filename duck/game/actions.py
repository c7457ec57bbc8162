"""The action vocabulary: ids, names, click coordinates, display strings and their parsing.

The engine's actions are RESET and ACTION1..ACTION7; ACTION6 is a click. Every spelling of an
action in the project is defined here and nowhere else: `Action(id, x, y)` (x the column, y the
row of a click; the record stores `to_json()`, `str(Action)` is our short name, read back by
`Action.parse`), `MODEL_NAMES` (the names model code uses in the sandbox: the Duck's, plus UNDO
and CLICK; a click there is `{"action": "MOUSE", "row": r, "col": c}`, row first) and
`display(action)` (what the sandbox reports an executed action as, byte for byte the Duck's,
because recorded Duck code and its traces compare these strings; `parse_display` reads them
back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

RESET_ID, CLICK_ID, UNDO_ID = 0, 6, 7

# Our short names of the actions (str(Action), Action.parse); the engine's ids are ACTION1..ACTION7.
NAMES = {RESET_ID: "RESET", 1: "UP", 2: "DOWN", 3: "LEFT", 4: "RIGHT", 5: "SPACE", CLICK_ID: "CLICK",
         UNDO_ID: "UNDO"}
IDS = {name: i for i, name in NAMES.items()} | {f"ACTION{i}": i for i in range(1, 8)} | {"MOUSE": CLICK_ID}


@dataclass(frozen=True)
class Action:
    """One game action. `x` is the column and `y` the row of a click, both in 0..63."""

    id: int
    x: int | None = None
    y: int | None = None

    def __post_init__(self) -> None:
        if self.id not in NAMES:
            raise ValueError(f"unknown action id {self.id!r}")
        if self.id == CLICK_ID:
            if not (isinstance(self.x, int) and isinstance(self.y, int)):
                raise ValueError("CLICK needs integer x and y")
            if not (0 <= self.x <= 63 and 0 <= self.y <= 63):
                raise ValueError(f"CLICK outside the 64x64 board: x={self.x}, y={self.y}")
        elif self.x is not None or self.y is not None:
            raise ValueError(f"{NAMES[self.id]} takes no coordinates")

    @classmethod
    def parse(cls, text: str) -> "Action":
        """`UP`, `action1`, `CLICK 12 40` (x then y), `RESET`, `UNDO`."""
        parts = text.replace(",", " ").split()
        if not parts:
            raise ValueError("empty action")
        name = parts[0].upper()
        if name not in IDS:
            raise ValueError(f"unknown action {parts[0]!r}; known: {', '.join(sorted(IDS))}")
        if IDS[name] == CLICK_ID:
            if len(parts) != 3:
                raise ValueError("CLICK needs x and y, e.g. 'CLICK 12 40'")
            return cls(CLICK_ID, int(parts[1]), int(parts[2]))
        return cls(IDS[name])

    @classmethod
    def click(cls, x: int, y: int) -> "Action":
        return cls(CLICK_ID, int(x), int(y))

    @classmethod
    def at(cls, row: Any, col: Any) -> "Action":
        """A click on the cell (row, col) as model code names it: each converted with `int()`
        and clamped onto the board, as the Duck's API did. Raises TypeError/ValueError."""
        return cls(CLICK_ID, min(63, max(0, int(col))), min(63, max(0, int(row))))

    @property
    def name(self) -> str:
        return NAMES[self.id]

    def __str__(self) -> str:
        return f"CLICK {self.x} {self.y}" if self.id == CLICK_ID else self.name

    def to_json(self) -> list[int]:
        return [self.id] if self.id != CLICK_ID else [CLICK_ID, self.x, self.y]

    @classmethod
    def from_json(cls, v: list[int]) -> "Action":
        return cls(v[0], *v[1:]) if len(v) > 1 else cls(v[0])


RESET = Action(RESET_ID)


@dataclass(frozen=True)
class ModelNames:
    """The action names of the sandbox: `listed` (id -> the name `valid_actions` shows; RESET
    is never listed) and `accepted` (every name `action()` takes, upper case -> id); a click may
    also be written as the text the results show it as, `'MOUSE(row=20, col=20)'`."""

    listed: Mapping[int, str]
    accepted: Mapping[str, int]

    def valid(self, available: list[int]) -> list[str]:
        """The names of the game's available actions, in the game's order."""
        return [self.listed[i] for i in available if i in self.listed]

    def id(self, name: Any) -> int | None:
        """The id of a name as model code wrote it (case and surrounding blanks ignored)."""
        return self.accepted.get(str(name or "").strip().upper())

    def click_text(self, name: Any) -> tuple[int, int] | None:
        """(row, col) of a click written as text (`MOUSE(row=20, col=20)`, `CLICK(col=3, row=4)`,
        any case and spacing), or None; a name longer than MAX_NAME is none (model text: every
        step here is linear, issue 37)."""
        if not isinstance(name, str) or len(name) > MAX_NAME:
            return None
        m = _CLICK_TEXT.fullmatch(name.strip())
        if m is None:
            return None
        parts = m.group(1).split(",")
        if len(parts) == 3 and not parts[2].strip():  # MOUSE(row=1, col=2,)
            parts.pop()
        args = {}
        for part in parts:
            key, eq, value = part.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not eq or key not in ("row", "col") or key in args or not _INT.fullmatch(value):
                return None
            args[key] = int(value)
        return (args["row"], args["col"]) if len(args) == 2 else None

    def item(self, action: Action) -> str | dict[str, Any]:
        """What model code passes to `action()` to play `action`."""
        if action.id == CLICK_ID:
            return {"action": "MOUSE", "row": action.y, "col": action.x}
        return "RESET" if action.id == RESET_ID else self.listed[action.id]


MAX_NAME = 64  # characters of an action name model code may send (the longest real one: 21)
# A click as text: MOUSE/CLICK/ACTION6 with keyword arguments row and col, in either order, an
# optional trailing comma. Parsed in two linear steps (no adjacent quantifiers that can trade
# characters: `\s*` beside `\s*` backtracked quadratically over a name of blanks, issue 37).
_CLICK_TEXT = re.compile(r"(?:MOUSE|CLICK|ACTION6)\s*\(([^()]*)\)", re.IGNORECASE)
_INT = re.compile(r"-?\d+")

_SIMPLE = {1: "UP", 2: "DOWN", 3: "LEFT", 4: "RIGHT", 5: "SPACE", CLICK_ID: "MOUSE"}
# The Duck's names (ACTION1-7, RESET, MOUSE and the key names), UNDO for ACTION7 and CLICK for MOUSE.
MODEL_NAMES = ModelNames(
    listed=_SIMPLE | {UNDO_ID: "UNDO"},
    accepted={name: i for i, name in _SIMPLE.items()} | {"RESET": RESET_ID, "UNDO": UNDO_ID,
                                                         "CLICK": CLICK_ID}
    | {f"ACTION{i}": i for i in range(1, 8)})


def display(action: Action) -> str:
    """The display string of an executed action: `UP`, `UNDO`, `RESET`, `MOUSE(row=y, col=x)`."""
    if action.id == CLICK_ID:
        return f"MOUSE(row={action.y}, col={action.x})"
    return "RESET" if action.id == RESET_ID else MODEL_NAMES.listed[action.id]


_CLICK_DISPLAY = re.compile(r"MOUSE\(row=(-?\d+), col=(-?\d+)\)")


def parse_display(text: str) -> Action:
    """The action of a display string (a click's cell is clamped onto the board). Raises
    ValueError for anything else."""
    text = text.strip()
    if m := _CLICK_DISPLAY.fullmatch(text):
        return Action.at(m.group(1), m.group(2))
    aid = MODEL_NAMES.id(text)
    if aid is None or aid == CLICK_ID:
        raise ValueError(f"not an action display string: {text!r}")
    return Action(aid)


def display_name(text: str) -> str:
    """The name part of a display string: `MOUSE(row=3, col=4)` -> `MOUSE`, `UP` -> `UP`."""
    return text.split("(", 1)[0]


def compress(actions: list[str]) -> str:
    """Display strings in a few words: ['UP', 'UP', 'LEFT'] → 'UP x2, LEFT'."""
    out: list[list[Any]] = []
    for a in actions:
        if out and out[-1][0] == a:
            out[-1][1] += 1
        else:
            out.append([a, 1])
    return ", ".join(f"{a} x{n}" if n > 1 else a for a, n in out)
