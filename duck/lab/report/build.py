"""The per-game scoring report of a run folder: `duck report RUN_DIR`.

Writes `report.html` (one self-contained file: CSS inline, plots and frames embedded as
base64 PNG, no script, no network; it opens from a Kaggle output folder) and `report.md`
(the same numbers without images). Everything comes from the records (duck.play.record) and
duck.play.scoring; nothing is re-run.

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

The pieces: duck.lab.report.views (what the records say, game by game), duck.lab.report.plots (the
palette, frames and plots as PNG) and duck.lab.report.html (HTML and Markdown rendering); this
module holds the report of a run folder (`Report`), its entry points (`build_report`,
`write_report`) and the `duck report` command, and re-exports the pieces' public names.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duck.play.record import read_records
from duck.lab.report.html import (fmt, fmt_int, report_html, report_markdown)
from duck.lab.report.views import (GameView, duck_for, game_view, load_duck_summary)
from duck.play.scoring import overall


@dataclass


class Report:
    """The views of a run folder's records, with the overall numbers and the table rows that
    the HTML and the Markdown share."""

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

    def html(self, frames: bool = True) -> str:
        return report_html(self, frames)

    def markdown(self) -> str:
        return report_markdown(self)


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


