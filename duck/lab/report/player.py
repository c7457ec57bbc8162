"""The step-through player of `duck report`: `RUN/player.html`, every action's board of every
game, with its animation frames, the action, why it was chosen, and for a model's game the
turn's code and output.

One static page (duck.lab.report.player_page: inline script and style, no server, no network,
no file read at run time) that opens from the run folder and in the Kaggle output viewer. Its
data are one JSON block (`player_data` here): per game every board as one base64 stream of
differences (`encode_boards`: ~5-20 bytes a board), a column per step field (the action, levels,
state, frames, time, why, the model turn), the level starts, GAME_OVERs and the win, the
record's events and the model's turns. The format: docs/runs.md, "The player's data"; the page's
script decodes the stream, and tests/test_report_player.py checks it against the records.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from duck.game.actions import Action
from duck.lab.report.conversation import code_of, readable, turns
from duck.lab.report.views import GameView
from duck.play.record import unpack_grid

MAX_TEXT = 4000  # characters of a turn's code or output kept on the page
STATES = {"NOT_FINISHED": "N", "WIN": "W", "GAME_OVER": "G"}
GAP = 3  # unchanged cells inside one run rather than a new run


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_board(prev: np.ndarray, cur: np.ndarray, out: bytearray) -> None:
    """Append `cur` as its differences from `prev` (both flat, one shape)."""
    idx = np.flatnonzero(prev != cur)
    runs: list[list[int]] = []
    for i in idx.tolist():
        if runs and i - runs[-1][1] <= GAP:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    _varint(len(runs), out)
    pos = 0
    for a, b in runs:
        _varint(a - pos, out)
        _varint(b - a, out)
        vals = (cur[a:b].astype(np.uint8) & 15).tolist()
        if len(vals) % 2:
            vals.append(0)
        out.extend((vals[k] << 4) | vals[k + 1] for k in range(0, len(vals), 2))
        pos = b


def encode_boards(boards: list[np.ndarray]) -> str:
    out = bytearray()
    prev = np.zeros(boards[0].size, dtype=np.int8) if boards else None
    for b in boards:
        flat = np.ascontiguousarray(b, dtype=np.int8).ravel()
        encode_board(prev, flat, out)
        prev = flat
    return base64.b64encode(bytes(out)).decode()


def _target(akey: str) -> str:
    """The explorer's action key as written in its reason (`1`, `(6, 12, 40)`, `R`) by name."""
    try:
        parts = [int(x) for x in akey.strip("()").split(",")]
        return str(Action.from_json(parts))
    except ValueError:
        return "RESET" if akey == "R" else akey


def explorer_reason(info: dict[str, Any]) -> str:
    """The explorer's `info` (duck.explorer.policy, `trace`) in words."""
    why = info.get("why")
    if isinstance(why, list) and len(why) == 3:
        d, cost, target = why
        where = "here" if d == 0 else f"{d} step{'s' if d != 1 else ''} away, on the way"
        return f"search: the cheapest untried action is {_target(str(target))}, {where} (rank cost {cost})"
    return {"nav": "navigator: walking the avatar toward a target",
            "fallback": "random: everything known was tried"}.get(str(why), str(why) if why else "")


def reason(info: Any) -> str:
    if not isinstance(info, dict):
        return ""
    if "turn" in info:
        return f"model turn {info['turn']}" + (f", call {info['call']}" if info.get("call") is not None else "")
    if isinstance(info.get("why"), str) and "nodes" not in info:
        return info["why"]  # a user policy's self.reason
    return explorer_reason(info)


def _action(a: Any) -> str:
    try:
        return str(Action.from_json(a))
    except (ValueError, TypeError):
        return str(a)


def _turns(v: GameView) -> dict[str, dict[str, Any]]:
    if v.conversation is None:
        return {}
    out = {}
    for t in turns(v.conversation)[0]:
        args = [c["function"].get("arguments", "") for kind, item in t.items if kind == "reply"
                for c in item["message"].get("tool_calls") or []]
        code = [a if (c := code_of(a)) is None else c for a in args]
        outs = [readable(item["content"]) for kind, item in t.items if kind == "tool"]
        out[str(t.index)] = {"lvl": t.level, "code": _cut("\n# ---\n".join(code)), "out": _cut("\n---\n".join(outs)),
                             "outcome": t.outcome}
    return out


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT:,} more characters)"


def game_data(v: GameView) -> dict[str, Any]:
    rec = v.record
    h = rec.header
    d: dict[str, Any] = {"id": rec.game_id, "title": h.get("title", ""), "policy": h.get("policy"),
                         "seed": h.get("seed"), "pass": h.get("pass", 0), "score": round(v.score.score, 3),
                         "levels_total": v.score.levels_total}
    if "grid" not in h:
        return d | {"boards": "", "n": 0, "h": 0, "w": 0, "a": [], "error": "no board recorded"}
    grid = unpack_grid(h["grid"])
    boards = [grid]
    cols: dict[str, list] = {"a": ["start"], "lv": [int(h.get("levels") or 0)], "fr": [1], "nf": [0],
                             "t": [0.0], "r": [0], "tn": [-1]}
    st = [STATES.get(h.get("state"), "N")]
    table: dict[str, int] = {"": 0}
    for a in rec.actions:
        anim = [f for f in unpack_grid(a["anim"])] if a.get("anim") else []
        anim = [f for f in anim if f.shape == grid.shape]
        if "grid" in a:
            g = unpack_grid(a["grid"])
            grid = g if g.shape == grid.shape else grid
        boards += anim + [grid]
        info = a.get("info")
        cols["a"].append(_action(a["action"]))
        cols["lv"].append(int(a["levels"]))
        cols["fr"].append(int(a.get("frames") or 1))
        cols["nf"].append(len(anim))
        cols["t"].append(round(float(a.get("t") or 0.0), 1))
        why = "RESET: the only action after GAME_OVER" if a["action"] == [0] and st[-1] == "G" else reason(info)
        cols["r"].append(table.setdefault(why, len(table)))
        cols["tn"].append(int(info["turn"]) if isinstance(info, dict) and isinstance(info.get("turn"), int) else -1)
        st.append(STATES.get(a.get("state"), "N"))
    d |= {"h": grid.shape[0], "w": grid.shape[1], "n": len(boards), "boards": encode_boards(boards), **cols,
          "st": "".join(st), "rt": list(table), "marks": marks(cols["lv"], st), "turns": _turns(v)}
    d["ev"] = {}
    for e in v.events:
        if e.get("kind") in ("scorecard",):
            continue
        d["ev"].setdefault(str(e.get("after_action", 0)), []).append(f"{e.get('kind')}: {str(e.get('message'))[:300]}")
    return d


def marks(levels: list[int], states: list[str]) -> list[dict[str, Any]]:
    """Where each level starts (the board after the action that completed the one before),
    each GAME_OVER (its first step) and the win."""
    out = [{"label": f"level {levels[0] + 1} start", "s": 0, "kind": "level"}]
    for s in range(1, len(levels)):
        if states[s] == "W":
            out.append({"label": "win", "s": s, "kind": "win"})
        elif levels[s] > levels[s - 1]:
            out.append({"label": f"level {levels[s] + 1} start", "s": s, "kind": "level"})
        if states[s] == "G" and states[s - 1] != "G":
            out.append({"label": f"GAME_OVER (level {levels[s] + 1})", "s": s, "kind": "over"})
    return out


def player_data(views: list[GameView], run: str) -> dict[str, Any]:
    from duck.game.frames import PALETTE
    return {"run": run, "palette": ["#%02x%02x%02x" % tuple(int(c) for c in rgb) for rgb in PALETTE],
            "games": [game_data(v) for v in views]}
