"""Reading Duck traces (../shared/duck-traces) for the stub server: one run's turns, and
its recorded action sequence in the record's encoding ([id] or [6, x, y])."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from duck.game.actions import parse_display


def load_runs(traces: str | Path) -> list[dict[str, Any]]:
    """The runs of a traces folder (runs.jsonl), in its order."""
    with open(Path(traces, "runs.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_trace(traces: str | Path, game: str, pass_: int) -> list[dict[str, Any]]:
    """The turns of one Duck run; `game` is an id or its 4-letter prefix."""
    files = sorted(Path(traces, "turns").glob(f"{game.split('-')[0]}*.jsonl.gz"))
    if not files:
        raise FileNotFoundError(f"no turns file for {game} under {traces}/turns")
    with gzip.open(files[0], "rt") as f:
        turns = [t for t in map(json.loads, f) if t["pass"] == pass_]
    if not turns:
        raise ValueError(f"{game}: no pass {pass_} in {files[0]}")
    return turns


def recorded_actions(turns: list[dict[str, Any]], run: dict[str, Any] | None = None,
                     partial: bool = False) -> list[list[int] | None] | None:
    """The run's full action sequence, in the record's encoding (`MOUSE(row=R, col=C)` → [6, C, R]). A call whose list is incomplete (transcript-derived:
    only its first names are known) makes this None, or with `partial`, contributes its
    known names followed by one None per unknown action."""
    out: list[list[int] | None] = []
    for t in turns:
        out += [parse_display(a).to_json() for a in t.get("pre_turn_auto_actions") or []]
        for c in t.get("calls", []):
            known = [parse_display(a).to_json() for a in c.get("actions") or []]
            if c.get("actions_complete") is False:
                if not partial:
                    return None
                known += [None] * (int(c.get("n_actions", len(known))) - len(known))
            out += known
    out += [parse_display(a).to_json() for a in (run or {}).get("trailing_auto_actions") or []]
    return out


def same_actions(got: list[list[int]], expected: list[list[int] | None]) -> int | None:
    """Index of the first difference (None where the record does not know the action), or
    None when the sequences agree everywhere and have the same length."""
    for i, (a, b) in enumerate(zip(got, expected)):
        if b is not None and a != b:
            return i
    return None if len(got) == len(expected) else min(len(got), len(expected))
