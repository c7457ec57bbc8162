"""The per-game scoring report of a run folder: `duck report RUN_DIR`.

Writes `report.html` (one self-contained file: CSS inline, plots and frames embedded as base64
PNG, no script, no network; it opens from a Kaggle output folder), `report.md` (the same numbers
without images) and `player.html` (duck.lab.report.player; `--no-player`: none). Everything comes
from the records (duck.play.record) and duck.play.scoring; nothing is re-run. `duck report A B`
compares two run folders game by game instead (duck.lab.report.compare). The sections and what
the report reads from a record beyond actions: docs/runs.md, "The report".

The pieces: duck.lab.report.views (what the records say, game by game), duck.lab.report.plots
(frames and plots as PNG), duck.lab.report.html (the `Report` of a run folder, rendered as HTML
and Markdown) and duck.lab.report.runinfo (the header, from run.json); this module holds the
entry points (`build_report`, `write_report`) and the `duck report` command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from duck.files import unwritable
from duck.play.record import read_records
from duck.lab.report.html import Report, report_html, report_markdown
from duck.lab.report.runinfo import load_info
from duck.lab.report.views import (duck_for, game_view, load_duck_summary)


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
    return Report(run_dir, views, load_info(run_dir))


def write_report(run_dir: str | Path, out: str | Path | None = None, *,
                 duck_summary: str | Path | None = None, frames: bool = True,
                 conversations: bool = True, player: bool = True, gifs: bool = True) -> dict[str, Path]:
    report = build_report(run_dir, duck_summary)
    out = Path(out) if out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"html": out / "report.html", "md": out / "report.md"}
    report.player = player
    paths["html"].write_text(report_html(report, frames, conversations), encoding="utf-8")
    paths["md"].write_text(report_markdown(report), encoding="utf-8")
    if gifs:  # one per game, to share (duck.lab.report.gif); the player links to each
        from duck.lab.report.gif import FOLDER, write_gif
        for v in report.views:
            if "grid" in v.record.header:
                write_gif(v.record, out / FOLDER / f"{v.record.game_id}.gif")
        paths["gif"] = out / FOLDER
    if player:
        from duck.lab.report.player import player_data
        from duck.lab.report.player_page import player_html
        data = player_data(report.views, Path(run_dir).name)
        for g in data["games"]:
            if (out / f"gif/{g['id']}.gif").is_file():
                g["gif"] = f"gif/{g['id']}.gif"
        paths["player"] = out / "player.html"
        paths["player"].write_text(player_html(data), encoding="utf-8")
    return paths


def _cmd(args: argparse.Namespace) -> int:
    runs = args.run_dir
    if len(runs) > 2:
        raise SystemExit(f"one run folder (its report) or two (their comparison), not {len(runs)}")
    for run in runs:
        if not Path(run).is_dir():
            raise SystemExit(f"{run}: " + ("not a folder" if Path(run).exists() else "no such folder"))
    _writable(args.out)
    if args.duck_summary is not None and Path(args.duck_summary).exists():  # absent: no column (its help)
        _summary_file(Path(args.duck_summary))
    if len(runs) == 2:
        from duck.lab.report.compare import write_comparison
        paths = write_comparison(runs[0], runs[1], args.out)
    else:
        paths = write_report(runs[0], args.out, duck_summary=args.duck_summary, frames=not args.no_frames,
                             conversations=not args.no_conversations, player=not args.no_player,
                             gifs=not args.no_gifs)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    what = f"the comparison of {runs[0]} (A) and {runs[1]} (B)" if len(runs) == 2 else \
        f"the report of {runs[0]}"
    names = ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths.values())
    where = "" if args.out else " (--out DIR writes it elsewhere)"
    print(f"duck report: wrote {what} into {paths['html'].parent}/: {names}{where}", file=sys.stderr)
    return 0


def _summary_file(path: Path) -> None:
    """A summary file named on the command line must be the Duck's summary.json."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"--duck-summary {path}: not the Duck's summary.json ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict):
        raise SystemExit(f"--duck-summary {path}: not the Duck's summary.json (not an object)")


def _writable(out: str | None) -> None:
    """--out must be a folder that can be made and written: one line, before any work."""
    if out is not None and (why := unwritable(out)):
        raise SystemExit(why)


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="per-game scoring report (report.html + report.md) of a run folder; "
                                      "with two, a comparison game by game")
    p.add_argument("run_dir", nargs="+", metavar="RUN",
                   help="a run folder (records/ inside); two: compare them (compare.html + compare.md)")
    p.add_argument("--out", default=None, help="folder for report.html/report.md, or compare.html/compare.md "
                                               "(default: the (first) run folder)")
    p.add_argument("--duck-summary", default=None,
                   help="the Duck's summary.json for reference means (default: ../shared/duck-traces/"
                        "summary.json or $DUCK_TRACES_SUMMARY; absent file: column left out)")
    p.add_argument("--no-frames", action="store_true", help="leave the level frames out (smaller file)")
    p.add_argument("--no-conversations", action="store_true",
                   help="leave the conversation views out of report.html (smaller file)")
    p.add_argument("--no-player", action="store_true",
                   help="write no player.html (the step-through player of every action's board)")
    p.add_argument("--no-gifs", action="store_true",
                   help="write no GIFs (gif/<game>.gif: each game as an animated GIF to share; `duck gif`)")
    p.set_defaults(func=_cmd)


