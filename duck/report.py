"""The per-game scoring report of a run folder: `duck report RUN_DIR`.

Writes `report.html` (one self-contained file: CSS inline, plots and frames embedded as
base64 PNG, no script, no network; it opens from a Kaggle output folder) and `report.md`
(the same numbers without images). Everything comes from the records (duck.record) and
duck.scoring; nothing is re-run.

Sections: the overall score; a table per game (levels, actions, score, time, model calls and
tokens when a model played, errors, the Duck's per-game mean for public games); then per game
the levels (actions versus the human baseline, score per level, time), plots of levels over
time and over actions and of actions versus baseline, the first and last frame of every level
reached, the notes at each level's end, and the errors and time-outs.

What the report reads from a record beyond actions (all optional):
* model use: `event` lines of kind `model` (one per model call; `data` with `prompt_tokens`,
  `completion_tokens`, `total_tokens`, `reasoning_tokens`, or those inside `data.usage`), or,
  when there are no such events, per-action `info` (`info.model` or `info` itself) with the
  same token keys and `calls`/`model_calls` counts;
* notes: `event` lines of kind `notes` (`message` text; `data` a string or a dict of named
  sections, optionally `data.level`); the last one of each level is shown;
* problems: `event` kinds naming an error, a time-out, a refusal or a failure (`error`,
  `timeout`, `model_timeout`, `refused`, ...); any other kind (except `scorecard`) is listed
  under "other events".

A level's "last frame" is the board before the action that completed it: a record keeps only
each action's final board, which for a level-up is already the next level's first board.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from duck.record import Record, read_record, read_records
from duck.scoring import GameScore, overall, score_record

DEFAULT_DUCK_SUMMARY = Path(__file__).resolve().parents[2] / "shared" / "duck-traces" / "summary.json"
QUIET_EVENTS = {"notes", "model", "scorecard"}
PROBLEM_WORDS = ("error", "timeout", "time_out", "time-out", "refused", "fail", "crash", "exception")


def is_problem(kind: Any) -> bool:
    k = str(kind).lower()
    return any(w in k for w in PROBLEM_WORDS)
TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens")
CALL_KEYS = ("calls", "model_calls", "n_calls")

# The official ARC-AGI-3 palette (arc_agi.rendering.COLOR_MAP), copied as a fallback.
_PALETTE_HEX = ["#FFFFFF", "#CCCCCC", "#999999", "#666666", "#333333", "#000000", "#E53AA3",
                "#FF7BCC", "#F93C31", "#1E93FF", "#88D8F1", "#FFDC00", "#FF851B", "#921231",
                "#4FCC30", "#A356D6"]


def palette() -> np.ndarray:
    """16×3 uint8 RGB, from the toolkit when it is importable."""
    try:
        _matplotlib_headless()
        from arc_agi.rendering import COLOR_MAP
        hexes = [COLOR_MAP[i] for i in range(16)]
    except Exception:  # informative only: the copy above is the same palette
        hexes = _PALETTE_HEX
    return np.array([[int(h.lstrip("#")[k:k + 2], 16) for k in (0, 2, 4)] for h in hexes], dtype=np.uint8)


def _matplotlib_headless() -> None:
    import matplotlib
    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg")


# ---------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------

def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def grid_png(grid: np.ndarray, scale: int = 4, pal: np.ndarray | None = None) -> bytes:
    from PIL import Image
    pal = palette() if pal is None else pal
    rgb = pal[np.clip(np.asarray(grid, dtype=np.int64), 0, 15)]
    img = Image.fromarray(rgb, "RGB")
    if scale != 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def fig_png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# What a record says, level by level
# ---------------------------------------------------------------------------------------

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

    @property
    def notes(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == "notes"]


def _ordered_events(rec: Record) -> list[dict[str, Any]]:
    """Events with `after_action` (actions sent before it) and `level` (the level being
    played when the last action before it was sent, so notes written right after a winning
    action belong to the level it won), read in file order."""
    start_levels = int(rec.header.get("levels") or 0)
    out: list[dict[str, Any]] = []
    if rec.path is not None and Path(rec.path).exists():
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
    # Levels before the record's start (a record that began mid-game) have no frames: skip.
    return GameView(rec, score, levels, curve, events, model_stats(rec), t_end, duck)


# ---------------------------------------------------------------------------------------
# The Duck's reference numbers
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------

def game_plot(view: GameView) -> bytes:
    from matplotlib.figure import Figure  # no pyplot: nothing global to clean up
    fig = Figure(figsize=(11.5, 2.7))
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.17, top=0.9, wspace=0.25)
    t = [c[0] for c in view.curve]
    n = [c[1] for c in view.curve]
    lv = [c[2] for c in view.curve]
    top = max(1, view.score.levels_total)
    axes[0].step(t, lv, where="post", color="#1E93FF")
    axes[0].set_xlabel("seconds")
    axes[0].set_ylabel("levels completed")
    axes[0].set_title("levels over time", fontsize=9)
    axes[1].step(n, lv, where="post", color="#4FCC30")
    axes[1].set_xlabel("actions")
    axes[1].set_title("levels over actions", fontsize=9)
    for ax in axes[:2]:
        ax.set_ylim(-0.1, top + 0.1)
        ax.yaxis.get_major_locator().set_params(integer=True)
    ax = axes[2]
    nums = [lev.number for lev in view.levels]
    if nums:
        x = np.arange(len(nums))
        ours = [lev.actions for lev in view.levels]
        base = [lev.baseline or 0 for lev in view.levels]
        colors = ["#FF851B" if lev.completed else "#CCCCCC" for lev in view.levels]
        ax.bar(x - 0.2, ours, width=0.4, color=colors, label="ours (grey: unfinished)")
        ax.bar(x + 0.2, base, width=0.4, color="#333333", label="human baseline")
        ax.set_xticks(x, [str(v) for v in nums])
        ax.legend(fontsize=7)
    ax.set_xlabel("level")
    ax.set_ylabel("actions")
    ax.set_title("actions vs human baseline", fontsize=9)
    for a in axes:
        a.tick_params(labelsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def overview_plot(views: list[GameView]) -> bytes:
    _matplotlib_headless()
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(views) + 1.5), 3.0))
    x = np.arange(len(views))
    ax.bar(x, [v.score.score for v in views], color="#1E93FF", label="this run")
    duck = [(i, v.duck["mean_score"]) for i, v in enumerate(views) if v.duck and "mean_score" in v.duck]
    if duck:
        ax.scatter([d[0] for d in duck], [d[1] for d in duck], marker="_", s=160, color="#F93C31",
                   label="Duck mean", zorder=3)
    ax.set_xticks(x, [v.game_id.split("-")[0] for v in views], rotation=90, fontsize=7)
    ax.set_ylabel("score (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig_png(fig)


# ---------------------------------------------------------------------------------------
# HTML and Markdown
# ---------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.2em auto;
max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-top:2px solid #ddd;padding-top:.6em;margin-top:1.6em}
h3{font-size:1em;margin:.9em 0 .3em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}
th,td{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.muted{color:#777;font-size:.85em}.bad{color:#b00}.good{color:#070}
.frames{display:flex;flex-wrap:wrap;gap:.8em}
.lvl{border:1px solid #ddd;padding:.3em;font-size:.8em}
.lvl img{width:192px;height:192px;image-rendering:pixelated;margin-right:.2em}
pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;font-size:.8em;max-height:24em;overflow:auto}
img.plot{max-width:100%}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def table(head: list[str], rows: Iterable[list[Any]], left: int = 1) -> str:
    th = "".join(f"<th{' class=l' if i < left else ''}>{esc(h)}</th>" for i, h in enumerate(head))
    body = []
    for r in rows:
        tds = "".join(f"<td{' class=l' if i < left else ''}>{c if isinstance(c, Raw) else esc(c)}</td>"
                      for i, c in enumerate(r))
        body.append(f"<tr>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """Already-escaped HTML for a table cell."""


def md_table(head: list[str], rows: Iterable[list[Any]]) -> str:
    def cell(c: Any) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(x: float | None, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def fmt_int(x: float | None) -> str:
    return "–" if x is None else f"{int(round(x)):,}"


def _anchor(game_id: str) -> str:
    return "game-" + "".join(c if c.isalnum() else "-" for c in game_id)


@dataclass
class Report:
    run_dir: Path
    views: list[GameView]
    duck_summary: dict[str, Any] | None

    @property
    def has_model(self) -> bool:
        return any(v.model for v in self.views)

    @property
    def has_duck(self) -> bool:
        return any(v.duck for v in self.views)

    def overall(self) -> dict[str, Any]:
        scores = [v.score for v in self.views]
        out: dict[str, Any] = {
            "score": overall(scores), "games": len(scores),
            "levels": sum(s.levels for s in scores), "levels_total": sum(s.levels_total for s in scores),
            "actions": sum(s.actions for s in scores),
            "seconds": sum(v.seconds for v in self.views),
            "errors": sum(1 for v in self.views for e in v.problems if "error" in str(e.get("kind"))),
            "timeouts": sum(1 for v in self.views for e in v.problems if "timeout" in str(e.get("kind"))),
            "games_won": sum(1 for v in self.views if v.score.levels >= v.score.levels_total > 0),
        }
        if self.has_model:
            out["model_calls"] = sum((v.model or {}).get("calls", 0) for v in self.views)
            out["tokens"] = sum((v.model or {}).get("total_tokens", 0) for v in self.views)
        duck = [v.duck for v in self.views if v.duck]
        if duck and len(duck) == len(self.views):
            out["duck_mean"] = sum(d["mean_score"] for d in duck) / len(duck)
            out["duck_levels"] = sum(d.get("mean_levels_completed", 0) for d in duck)
        return out

    def game_rows(self) -> tuple[list[str], list[list[Any]]]:
        head = ["game", "levels", "actions", "score"]
        if self.has_duck:
            head += ["Duck mean", "Duck levels"]
        head += ["time (s)"]
        if self.has_model:
            head += ["model calls", "tokens"]
        head += ["errors + time-outs", "end"]
        rows = []
        for v in self.views:
            s = v.score
            r: list[Any] = [v.game_id, f"{s.levels}/{s.levels_total}", s.actions, fmt(s.score)]
            if self.has_duck:
                r += [fmt(v.duck.get("mean_score")) if v.duck else "–",
                      fmt(v.duck.get("mean_levels_completed"), 1) if v.duck else "–"]
            r += [fmt(v.seconds, 1)]
            if self.has_model:
                r += [fmt_int((v.model or {}).get("calls")), fmt_int((v.model or {}).get("total_tokens"))]
            end = (v.record.end or {}).get("reason", "no end line")
            r += [len(v.problems), end + (f" ({s.error})" if s.error else "")]
            rows.append(r)
        return head, rows

    @staticmethod
    def level_rows(v: GameView) -> tuple[list[str], list[list[Any]]]:
        head = ["level", "baseline", "actions", "actions / baseline", "level score (%)", "seconds", "game overs",
                "resets", "status"]
        rows = []
        for lev in v.levels:
            ratio = lev.actions / lev.baseline if lev.baseline else None
            rows.append([lev.number, lev.baseline if lev.baseline is not None else "–", lev.actions,
                         fmt(ratio), fmt(lev.score) if lev.completed else "–",
                         fmt(lev.t_end - lev.t_start, 1), lev.game_overs, lev.resets,
                         "completed" if lev.completed else "unfinished"])
        return head, rows

    # -- HTML --------------------------------------------------------------------------

    def html(self, frames: bool = True) -> str:
        o = self.overall()
        pal = palette()
        parts = [f"<h1>Run report: {esc(self.run_dir.name)}</h1>",
                 f"<p class=muted>{esc(self.run_dir)} · {len(self.views)} games · generated by "
                 f"<code>duck report</code> from the records; scores as duck.scoring (percent).</p>"]
        ov = [["score (mean over games)", fmt(o["score"], 3)]]
        if "duck_mean" in o:
            ov.append(["Duck mean over the same games (reference)", fmt(o["duck_mean"], 3)])
        ov += [["levels completed", f"{o['levels']} / {o['levels_total']}"],
               ["games won", o["games_won"]], ["actions", f"{o['actions']:,}"],
               ["game time, summed (s)", fmt(o["seconds"], 1)],
               ["errors / time-outs", f"{o['errors']} / {o['timeouts']}"]]
        if self.has_model:
            ov += [["model calls", fmt_int(o["model_calls"])], ["tokens", fmt_int(o["tokens"])]]
        parts.append("<section id=overall><h2>Overall</h2>" + table(["", "value"], ov) + "</section>")

        head, rows = self.game_rows()
        for r, v in zip(rows, self.views):
            r[0] = Raw(f"<a href=\"#{_anchor(v.game_id)}\">{esc(v.game_id)}</a>")
        parts.append("<section id=games><h2>Games</h2>" + table(head, rows)
                     + f"<img class=plot alt=\"score per game\" src=\"{png_data_uri(overview_plot(self.views))}\">"
                     + "</section>")

        for v in self.views:
            parts.append(self._game_html(v, pal, frames))
        return page(f"duck report: {self.run_dir.name}", "\n".join(parts))

    def _game_html(self, v: GameView, pal: np.ndarray, frames: bool) -> str:
        s = v.score
        h = [f"<section class=game id=\"{_anchor(v.game_id)}\" data-game=\"{esc(v.game_id)}\">",
             f"<h2>{esc(v.game_id)} <span class=muted>{esc(v.record.header.get('title', ''))}</span></h2>"]
        line = (f"score <b>{fmt(s.score)}</b> · levels {s.levels}/{s.levels_total} · {s.actions} actions · "
                f"{fmt(v.seconds, 1)} s · policy {esc(v.record.header.get('policy'))} · seed "
                f"{esc(v.record.header.get('seed'))} · pass {esc(v.record.header.get('pass', 0))}")
        if v.duck:
            line += (f" · Duck mean {fmt(v.duck.get('mean_score'))} "
                     f"({fmt(v.duck.get('mean_levels_completed'), 1)} levels, "
                     f"{fmt(v.duck.get('mean_actions'), 0)} actions)")
        if v.model:
            line += f" · {fmt_int(v.model.get('calls'))} model calls, {fmt_int(v.model.get('total_tokens'))} tokens"
        h.append(f"<p>{line}</p>")
        head, rows = self.level_rows(v)
        h.append("<h3>Levels</h3>" + (table(head, rows) if rows else "<p class=muted>no level played</p>"))
        h.append(f"<img class=plot alt=\"levels over time and actions\" src=\"{png_data_uri(game_plot(v))}\">")
        if frames and not v.levels:
            h.append("<h3>First and last frame of each level</h3><p class=muted>no level played</p>")
        if frames and v.levels:
            h.append("<h3>First and last frame of each level</h3><div class=frames>")
            for lev in v.levels:
                last = "before the winning action" if lev.completed else "at the end of play"
                h.append(
                    f"<div class=lvl><div>level {lev.number} ({'completed' if lev.completed else 'unfinished'}, "
                    f"actions {lev.start_i}–{lev.end_i})</div>"
                    f"<img class=frame data-level={lev.number} data-kind=first alt=\"level {lev.number} first frame\" "
                    f"title=\"first frame (after action {lev.start_i})\" src=\"{png_data_uri(grid_png(lev.first_grid, 3, pal))}\">"
                    f"<img class=frame data-level={lev.number} data-kind=last alt=\"level {lev.number} last frame\" "
                    f"title=\"last frame ({last})\" src=\"{png_data_uri(grid_png(lev.last_grid, 3, pal))}\">"
                    f"<div class=muted>first · last ({last})</div></div>")
            h.append("</div>")
        h.append("<h3>Notes at each level's end</h3>")
        noted = [lev for lev in v.levels if lev.notes]
        if noted:
            for lev in noted:
                h.append(f"<div class=notes data-level={lev.number}><b>level {lev.number}</b> "
                         f"<span class=muted>({len(lev.notes)} notes events; the last)</span>"
                         f"<pre>{esc(notes_text(lev.notes[-1]))}</pre></div>")
        else:
            h.append("<p class=muted>no notes recorded</p>")
        h.append("<h3>Errors and time-outs</h3>")
        probs = v.problems
        if probs:
            h.append(table(["kind", "level", "after action", "t (s)", "message"],
                           [[e.get("kind"), e.get("level"), e.get("after_action"), fmt(e.get("t"), 1),
                             _short(e.get("message", ""), 600)] for e in probs], left=1))
        else:
            h.append("<p class=muted>none</p>")
        if v.other_events:
            h.append("<h3>Other events</h3>" + table(
                ["kind", "level", "after action", "t (s)", "message"],
                [[e.get("kind"), e.get("level"), e.get("after_action"), fmt(e.get("t"), 1),
                  _short(e.get("message", ""), 300)] for e in v.other_events[:50]]))
        h.append("</section>")
        return "\n".join(h)

    # -- Markdown ----------------------------------------------------------------------

    def markdown(self) -> str:
        o = self.overall()
        out = [f"# Run report: {self.run_dir.name}", "",
               f"Score **{o['score']:.3f}** (mean over {len(self.views)} games)"
               + (f"; the Duck's mean over the same games: {o['duck_mean']:.3f}" if "duck_mean" in o else "")
               + f". Levels {o['levels']}/{o['levels_total']}, {o['actions']:,} actions, "
               f"{o['seconds']:.0f} s of game time, {o['errors']} errors, {o['timeouts']} time-outs"
               + (f", {fmt_int(o['model_calls'])} model calls, {fmt_int(o['tokens'])} tokens" if self.has_model else "")
               + ".", "", "## Games", ""]
        head, rows = self.game_rows()
        out += [md_table(head, rows), ""]
        for v in self.views:
            s = v.score
            out += [f"## {v.game_id}", "",
                    f"Score {s.score:.2f}, levels {s.levels}/{s.levels_total}, {s.actions} actions, "
                    f"{v.seconds:.1f} s" + (f"; Duck mean {v.duck['mean_score']:.2f}" if v.duck else "") + ".", ""]
            head, rows = self.level_rows(v)
            if rows:
                out += [md_table(head, rows), ""]
            for lev in v.levels:
                if lev.notes:
                    out += [f"Notes at the end of level {lev.number}:", "", "```",
                            notes_text(lev.notes[-1]), "```", ""]
            if v.problems:
                out += ["Errors and time-outs:", ""]
                out += [f"- {e.get('kind')} (level {e.get('level')}, after action {e.get('after_action')}): "
                        f"{_short(e.get('message', ''), 300)}" for e in v.problems]
                out.append("")
        return "\n".join(out)


def notes_text(e: dict[str, Any]) -> str:
    data = e.get("data")
    parts = [str(e.get("message") or "")]
    if isinstance(data, str):
        parts.append(data)
    elif isinstance(data, dict):
        for k, val in data.items():
            if k == "level":
                continue
            parts.append(f"{k}: {val if isinstance(val, str) else json.dumps(val)}")
    elif data is not None:
        parts.append(json.dumps(data))
    return "\n".join(p for p in parts if p).strip()


def _short(text: Any, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def build_report(run_dir: str | Path, duck_summary: str | Path | None = None) -> Report:
    run_dir = Path(run_dir)
    if not (run_dir / "records").is_dir():
        subs = sorted(p.parent for p in run_dir.glob("**/records") if p.is_dir())
        hint = f"; run folders inside it: {', '.join(str(s) for s in subs[:5])}" if subs else ""
        raise SystemExit(f"{run_dir} has no records/ folder{hint}")
    summary = load_duck_summary(duck_summary)
    views = [game_view(r, duck_for(summary, r.game_id)) for r in read_records(run_dir)]
    if not views:
        raise SystemExit(f"{run_dir}/records holds no records")
    return Report(run_dir, views, summary)


def write_report(run_dir: str | Path, out: str | Path | None = None, *,
                 duck_summary: str | Path | None = None, frames: bool = True) -> dict[str, Path]:
    report = build_report(run_dir, duck_summary)
    out = Path(out) if out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "report.html", "md": out / "report.md"}
    paths["html"].write_text(report.html(frames=frames), encoding="utf-8")
    paths["md"].write_text(report.markdown(), encoding="utf-8")
    return paths


def _cmd(args: argparse.Namespace) -> int:
    paths = write_report(args.run_dir, args.out, duck_summary=args.duck_summary, frames=not args.no_frames)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="per-game scoring report (report.html + report.md) of a run folder")
    p.add_argument("run_dir", help="a run folder (records/ inside)")
    p.add_argument("--out", default=None, help="folder for report.html/report.md (default: the run folder)")
    p.add_argument("--duck-summary", default=None,
                   help="the Duck's summary.json for reference means (default: ../shared/duck-traces/"
                        "summary.json or $DUCK_TRACES_SUMMARY; absent file: column left out)")
    p.add_argument("--no-frames", action="store_true", help="leave the level frames out (smaller file)")
    p.set_defaults(func=_cmd)


__all__ = ["build_report", "write_report", "register", "game_view", "model_stats", "grid_png",
           "png_data_uri", "page", "table", "Raw", "esc", "fmt", "md_table", "read_record"]
