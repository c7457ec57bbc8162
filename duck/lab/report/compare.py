"""`duck report A B`: two run folders compared game by game.

Writes `compare.html` and `compare.md` (into `--out`, default A): both runs' headers, the config
fields they differ in, the overall numbers and a row per game of either run (a game only one
run has is marked, never dropped). A side-by-side reading, not a test: that is `duck ab-stats`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from duck.lab.report.blocks import esc, fmt, md_table, page, table
from duck.lab.report.runinfo import config_difference, header_rows, load_info
from duck.play.record import read_records
from duck.play.scoring import GameScore, overall, score_record


def _scores(run: Path) -> dict[str, GameScore]:
    if not (run / "records").is_dir():
        raise SystemExit(f"{run} has no records/ folder")
    return {s.game_id: s for s in (score_record(r) for r in read_records(run))}


def comparison(a: Path, b: Path) -> dict[str, Any]:
    """The numbers both pages show."""
    sa, sb = _scores(a), _scores(b)
    games = sorted(set(sa) | set(sb))
    rows = []
    for g in games:
        x, y = sa.get(g), sb.get(g)
        rows.append({"game": g, "a": x, "b": y,
                     "delta": (y.score - x.score) if x and y else None,
                     "levels_delta": (y.levels - x.levels) if x and y else None})
    both = [r for r in rows if r["a"] and r["b"]]
    return {"a": a, "b": b, "info_a": load_info(a), "info_b": load_info(b), "rows": rows,
            "score_a": overall(sa.values()), "score_b": overall(sb.values()),
            "score_a_common": overall(r["a"] for r in both), "score_b_common": overall(r["b"] for r in both),
            "common": len(both), "only_a": [g for g in games if g not in sb],
            "only_b": [g for g in games if g not in sa], "b_ahead": sum(1 for r in both if r["delta"] > 1e-9),
            "a_ahead": sum(1 for r in both if r["delta"] < -1e-9), "sa": sa, "sb": sb}


def _game_rows(c: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    head = ["game", "A score", "B score", "B − A", "A levels", "B levels", "A actions", "B actions", "note"]
    out = []
    for r in c["rows"]:
        x, y = r["a"], r["b"]
        note = "only in A" if not y else "only in B" if not x else ""
        for s, side in ((x, "A"), (y, "B")):
            if s is not None and s.error:
                note += f" {side}: {s.error[:60]}"
        out.append([r["game"], fmt(x.score) if x else "–", fmt(y.score) if y else "–",
                    f"{r['delta']:+.2f}" if r["delta"] is not None else "–",
                    f"{x.levels}/{x.levels_total}" if x else "–",
                    f"{y.levels}/{y.levels_total}" if y else "–", x.actions if x else "–",
                    y.actions if y else "–", note.strip()])
    return head, out


def _overall_rows(c: dict[str, Any]) -> list[list[Any]]:
    sa, sb = c["sa"].values(), c["sb"].values()
    return [["games", len(c["sa"]), len(c["sb"]), ""],
            ["score (mean over its games)", fmt(c["score_a"], 3), fmt(c["score_b"], 3),
             f"{c['score_b'] - c['score_a']:+.3f}"],
            [f"score over the {c['common']} games in both", fmt(c["score_a_common"], 3),
             fmt(c["score_b_common"], 3), f"{c['score_b_common'] - c['score_a_common']:+.3f}"],
            ["levels completed", sum(s.levels for s in sa), sum(s.levels for s in sb),
             f"{sum(s.levels for s in sb) - sum(s.levels for s in sa):+d}"],
            ["actions", sum(s.actions for s in sa), sum(s.actions for s in sb), ""],
            ["games ahead", c["a_ahead"], c["b_ahead"], ""]]


def compare_html(c: dict[str, Any]) -> str:
    a, b = c["a"], c["b"]
    parts = [f"<h1>Run comparison: {esc(a.name)} (A) vs {esc(b.name)} (B)</h1>",
             "<p class=muted>from the records of both run folders (duck.play.scoring, percent); a "
             "side-by-side reading, not a test: <code>duck ab-stats A B</code> has the paired statistics.</p>",
             "<section id=overall><h2>Overall</h2>" + table(["", "A", "B", "B − A"], _overall_rows(c)) + "</section>"]
    diff = config_difference(c["info_a"], c["info_b"])
    parts.append("<section id=config><h2>What differs</h2>"
                 + (table(["field", "A", "B"], diff) if diff else "<p class=muted>the same config and commit"
                    + ("" if c["info_a"] and c["info_b"] else " (as far as run.json says: one run has none)")
                    + "</p>") + "</section>")
    head, rows = _game_rows(c)
    parts.append("<section id=games><h2>Games</h2>" + table(head, rows) + "</section>")
    for side, run, info in (("A", a, c["info_a"]), ("B", b, c["info_b"])):
        parts.append(f"<section><h2>Run {side}: {esc(run)}</h2>"
                     + table(["", "value"], header_rows(info, list(c["s" + side.lower()]))) + "</section>")
    return page(f"duck report: {a.name} vs {b.name}", "\n".join(parts))


def compare_markdown(c: dict[str, Any]) -> str:
    a, b = c["a"], c["b"]
    out = [f"# Run comparison: {a.name} (A) vs {b.name} (B)", "",
           md_table(["", "A", "B", "B − A"], _overall_rows(c)), ""]
    diff = config_difference(c["info_a"], c["info_b"])
    out += ["## What differs", "",
            md_table(["field", "A", "B"], diff) if diff else "the same config and commit", ""]
    head, rows = _game_rows(c)
    out += ["## Games", "", md_table(head, rows), ""]
    for side, run, info in (("A", a, c["info_a"]), ("B", b, c["info_b"])):
        out += [f"## Run {side}: {run}", "",
                md_table(["", "value"], header_rows(info, list(c["s" + side.lower()]))), ""]
    return "\n".join(out)


def write_comparison(a: str | Path, b: str | Path, out: str | Path | None = None) -> dict[str, Path]:
    c = comparison(Path(a), Path(b))
    folder = Path(out) if out else Path(a)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"html": folder / "compare.html", "md": folder / "compare.md"}
    paths["html"].write_text(compare_html(c), encoding="utf-8")
    paths["md"].write_text(compare_markdown(c), encoding="utf-8")
    return paths
