"""Per-game views of a run folder's records, for `duck report`: the levels a record played, the
curve of levels over time and actions, the events placed by level and action, model calls and
tokens, and the Duck's reference numbers. All derived from the records (duck.play.record) and
duck.play.scoring; what a record may hold beyond actions: docs/runs.md, "Records".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from duck.paths import SHARED
from duck.play.conversation import find_conversation, read_conversation
from duck.play.record import Record
from duck.play.scoring import GameScore, score_record

DEFAULT_DUCK_SUMMARY = SHARED / "duck-traces" / "summary.json"
QUIET_EVENTS = {"notes", "model", "scorecard"}
PROBLEM_WORDS = ("error", "timeout", "time_out", "time-out", "refused", "fail", "crash", "exception")
TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens")
CALL_KEYS = ("calls", "model_calls", "n_calls")


def is_problem(kind: Any) -> bool:
    k = str(kind).lower()
    return any(w in k for w in PROBLEM_WORDS)


@dataclass
class Level:
    number: int  # 1-based
    baseline: int | None
    start_i: int  # action index when the level began (0 = game start)
    end_i: int  # action index of the completing action, or of the last action played
    t_start: float
    t_end: float
    completed: bool
    score: float | None
    first_grid: np.ndarray
    last_grid: np.ndarray
    game_overs: int = 0
    resets: int = 0
    notes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def actions(self) -> int:
        return self.end_i - self.start_i


@dataclass
class GameView:
    record: Record
    score: GameScore
    levels: list[Level]
    curve: list[tuple[float, int, int]]  # (t, actions, levels) from start to end
    events: list[dict[str, Any]]  # with "level" and "after_action" added
    model: dict[str, float] | None
    seconds: float
    duck: dict[str, Any] | None = None
    grids: dict[int, np.ndarray] = field(default_factory=dict)  # action index → board after it
    conversation: Any = None  # duck.play.conversation.Conversation, when the game has one
    conversation_error: str | None = None  # why a conversation file could not be read

    @property
    def game_id(self) -> str:
        return self.record.game_id

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Errors, time-outs, refusals, failures."""
        return [e for e in self.events if e.get("kind") not in QUIET_EVENTS and is_problem(e.get("kind"))]

    @property
    def other_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") not in QUIET_EVENTS and not is_problem(e.get("kind"))]


def _ordered_events(rec: Record) -> list[dict[str, Any]]:
    """Events with `after_action` (actions sent before it) and `level` (the level being
    played when the last action before it was sent, so notes written right after a winning
    action belong to the level it won), read in file order."""
    start_levels = int(rec.header.get("levels") or 0)
    out: list[dict[str, Any]] = []
    if rec.path is not None and Path(rec.path).is_file() and not rec.problems:  # else: skipped lines
        last_i, levels_before_last, levels_now = 0, start_levels, start_levels
        with open(rec.path, encoding="utf-8") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    break
                if obj.get("type") == "action":
                    last_i = obj["i"]
                    levels_before_last, levels_now = levels_now, obj.get("levels", levels_now)
                elif obj.get("type") == "event":
                    out.append(obj | {"after_action": last_i, "level": levels_before_last + 1})
        return [_event_level(e) for e in out]
    # No file to re-read: place events by time.
    for e in rec.events:
        before = [a for a in rec.actions if a.get("t", 0) <= e.get("t", 0)]
        prev = before[-2]["levels"] if len(before) > 1 else start_levels
        out.append(e | {"after_action": before[-1]["i"] if before else 0, "level": prev + 1})
    return [_event_level(e) for e in out]


def _event_level(e: dict[str, Any]) -> dict[str, Any]:
    data = e.get("data")
    if isinstance(data, dict) and isinstance(data.get("level"), int):
        e = e | {"level": data["level"]}
    return e


def _usage(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    out: dict[str, float] = {}
    for src in (d, d.get("usage") if isinstance(d.get("usage"), dict) else {}):
        for k in TOKEN_KEYS + CALL_KEYS + ("seconds", "latency_s"):
            v = src.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                key = "calls" if k in CALL_KEYS else ("seconds" if k == "latency_s" else k)
                out[key] = out.get(key, 0.0) + float(v)
    return out


def model_stats(rec: Record) -> dict[str, float] | None:
    """Model calls and tokens of a record, or None when no model played (see module doc)."""
    total: dict[str, float] = {}
    events = [e for e in rec.events if e.get("kind") == "model"]
    if events:
        for e in events:
            u = _usage(e.get("data"))
            u.pop("calls", None)
            for k, v in u.items():
                total[k] = total.get(k, 0.0) + v
        total["calls"] = float(len(events))
    else:
        for a in rec.actions:
            info = a.get("info")
            if not isinstance(info, dict):
                continue
            src = info.get("model") if isinstance(info.get("model"), dict) else info
            for k, v in _usage(src).items():
                total[k] = total.get(k, 0.0) + v
        if not total:
            return None
    if "total_tokens" not in total and ("prompt_tokens" in total or "completion_tokens" in total):
        total["total_tokens"] = total.get("prompt_tokens", 0.0) + total.get("completion_tokens", 0.0)
    return total


def game_view(rec: Record, duck: dict[str, Any] | None = None) -> GameView:
    score = score_record(rec)
    baselines = rec.header.get("baselines") or []
    grids = dict(rec.grids()) if rec.header.get("grid") else {}
    events = _ordered_events(rec)
    levels_total = score.levels_total or len(baselines)
    lv0 = int(rec.header.get("levels") or 0)
    t_end = float((rec.end or {}).get("t") or (rec.actions[-1]["t"] if rec.actions else 0.0))

    levels: list[Level] = []
    curve: list[tuple[float, int, int]] = [(0.0, 0, lv0)]
    blank = np.zeros((64, 64), dtype=np.int8)
    cur_start, cur_t, cur_levels = 0, 0.0, lv0
    go, resets = 0, 0
    for a in rec.actions:
        i, lv = a["i"], a["levels"]
        curve.append((float(a.get("t", 0.0)), i, lv))
        if a.get("action") == [0]:
            resets += 1
        if a.get("state") == "GAME_OVER":
            go += 1
        if lv > cur_levels:
            for n in range(cur_levels + 1, lv + 1):
                first = n == cur_levels + 1
                idx = len(levels)
                levels.append(Level(
                    number=n, baseline=baselines[n - 1] if n - 1 < len(baselines) else None,
                    start_i=cur_start if first else i, end_i=i,
                    t_start=cur_t if first else float(a["t"]), t_end=float(a["t"]), completed=True,
                    score=score.level_scores[idx] if idx < len(score.level_scores) else None,
                    first_grid=grids.get(cur_start, blank) if first else grids.get(i, blank),
                    last_grid=grids.get(i - 1, blank) if first else grids.get(i, blank),
                    game_overs=go if first else 0, resets=resets if first else 0))
            cur_start, cur_t, cur_levels, go, resets = i, float(a["t"]), lv, 0, 0
    final_state = rec.actions[-1]["state"] if rec.actions else rec.header.get("state")
    if rec.header.get("state") != "ERROR" and cur_levels < levels_total and final_state != "WIN":
        last_i = rec.actions[-1]["i"] if rec.actions else 0
        levels.append(Level(
            number=cur_levels + 1,
            baseline=baselines[cur_levels] if cur_levels < len(baselines) else None,
            start_i=cur_start, end_i=last_i, t_start=cur_t, t_end=t_end, completed=False, score=None,
            first_grid=grids.get(cur_start, blank), last_grid=grids.get(last_i, blank),
            game_overs=go, resets=resets))
    if curve and t_end > curve[-1][0]:
        curve.append((t_end, curve[-1][1], curve[-1][2]))
    for lev in levels:
        lev.notes = [e for e in events if e.get("kind") == "notes" and e.get("level") == lev.number]
    view = GameView(rec, score, levels, curve, events, model_stats(rec), t_end, duck, grids)
    if rec.path is not None and (path := find_conversation(rec.path)) is not None:
        try:
            view.conversation = read_conversation(path)
        except (OSError, EOFError, ValueError) as e:  # a damaged file: say so, report the rest
            view.conversation_error = f"{path.name}: {type(e).__name__}: {e}"
    return view


# -- The Duck's reference numbers -------------------------------------------------------

def load_duck_summary(path: str | Path | None) -> dict[str, Any] | None:
    """summary.json of the Duck's traces, or None when absent (the column is then left out)."""
    if path is None:
        env = os.environ.get("DUCK_TRACES_SUMMARY")
        path = Path(env) if env else DEFAULT_DUCK_SUMMARY
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def duck_for(summary: dict[str, Any] | None, game_id: str) -> dict[str, Any] | None:
    if not summary:
        return None
    games = summary.get("games", {})
    if game_id in games:
        return games[game_id]
    prefix = game_id.split("-")[0]
    return next((v for k, v in games.items() if k.split("-")[0] == prefix), None)
