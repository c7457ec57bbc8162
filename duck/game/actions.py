"""The action vocabulary: ids, names, coordinates, display strings and their parsing.

The engine's actions are RESET and ACTION1..ACTION7; ACTION6 is a click at (x, y) with x the
column and y the row, both in 0..63. Everything else in the project speaks of actions through
`Action` and the tables here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Readable names of the simple actions; the engine's ids are ACTION1..ACTION7.
NAMES = {0: "RESET", 1: "UP", 2: "DOWN", 3: "LEFT", 4: "RIGHT", 5: "SPACE", 6: "CLICK", 7: "UNDO"}
IDS = {name: i for i, name in NAMES.items()} | {f"ACTION{i}": i for i in range(1, 8)} | {"MOUSE": 6}



@dataclass(frozen=True)
class Action:
    """One game action. `x` is the column and `y` the row of a click, both in 0..63."""

    id: int
    x: int | None = None
    y: int | None = None

    def __post_init__(self) -> None:
        if self.id not in NAMES:
            raise ValueError(f"unknown action id {self.id!r}")
        if self.id == 6:
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
        if IDS[name] == 6:
            if len(parts) != 3:
                raise ValueError("CLICK needs x and y, e.g. 'CLICK 12 40'")
            return cls(6, int(parts[1]), int(parts[2]))
        return cls(IDS[name])

    @classmethod
    def click(cls, x: int, y: int) -> "Action":
        return cls(6, int(x), int(y))

    @property
    def name(self) -> str:
        return NAMES[self.id]

    def __str__(self) -> str:
        return f"CLICK {self.x} {self.y}" if self.id == 6 else self.name

    def to_json(self) -> list[int]:
        return [self.id] if self.id != 6 else [6, self.x, self.y]

    @classmethod
    def from_json(cls, v: list[int]) -> "Action":
        return cls(v[0], *v[1:]) if len(v) > 1 else cls(v[0])


RESET = Action(0)


