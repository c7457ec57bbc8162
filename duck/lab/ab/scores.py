"""Scores of an A/B arm, game -> pass -> score: from the records of a run folder (paired by
header pass, or by seed when passes repeat), a record file, or a file in the format of
duck-traces/runs.jsonl; pass filters and pairing by order for A/A splits (duck.lab.ab.run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from duck.lab.stats import scores_from_runs_jsonl
from duck.play.record import read_record
from duck.play.scoring import record_finished, score_record


def _record_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.jsonl") if p.parent.name == "records")


def scores_from_records(paths: list[Path]) -> tuple[dict[str, dict[Any, float]], dict[str, int]]:
    """game -> pass -> score from records; pairs by header pass, or by seed if passes repeat."""
    rows, incomplete = [], 0
    for p in paths:
        try:
            rec = read_record(p)
        except ValueError:
            continue
        if not record_finished(rec):
            incomplete += 1  # a run cut mid-game (killed, Ctrl-C, a full disk): its score is only a lower bound
            continue
        rows.append((rec.game_id, rec.header.get("pass", 0), rec.header.get("seed"), score_record(rec).score))
    by = "pass"
    if len({(g, p) for g, p, _, _ in rows}) < len(rows):
        by = "seed"
        if len({(g, s) for g, _, s, _ in rows}) < len(rows):
            raise SystemExit("records repeat the same game with the same pass and seed: "
                             "give one run per (game, pass) on each side")
    out: dict[str, dict[Any, float]] = {}
    for g, p, s, score in rows:
        out.setdefault(g, {})[p if by == "pass" else s] = score
    return out, {"runs": len(rows), "incomplete": incomplete, "paired_by": by}


def load_scores(path: str | Path) -> tuple[dict[str, dict[Any, float]], dict[str, Any]]:
    """Scores of one arm from a run folder, a record file, or a runs.jsonl-format file."""
    path = Path(path)
    if path.is_dir():
        files = _record_files(path)
        if not files:
            raise SystemExit(f"{path}: no records/*.jsonl below it")
        scores, info = scores_from_records(files)
        return scores, {"source": str(path), **info}
    if not path.is_file():
        raise SystemExit(f"{path}: no such file or folder")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if lines and lines[0].get("type") == "header":
        scores, info = scores_from_records([path])
        return scores, {"source": str(path), **info}
    return scores_from_runs_jsonl(lines), {"source": str(path), "runs": len(lines), "paired_by": "pass"}


def parse_passes(spec: str | None) -> set[int] | None:
    """`0-4`, `5,7,9`, `0-2,8` → a set of passes."""
    if not spec:
        return None
    out: set[int] = set()
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        elif part.strip():
            out.add(int(part))
    return out


def filter_passes(scores: dict[str, dict[Any, float]], keep: set[int] | None) -> dict[str, dict[Any, float]]:
    if keep is None:
        return scores
    return {g: {k: v for k, v in d.items() if k in keep} for g, d in scores.items()}


def pair_by_order(scores: dict[str, dict[Any, float]]) -> dict[str, dict[int, float]]:
    """Re-key each game's runs 0, 1, 2, ... in pass order (to pair two disjoint pass sets)."""
    return {g: {i: d[k] for i, k in enumerate(sorted(d))} for g, d in scores.items()}


def arm_scores(out: Path, arm: str) -> dict[str, dict[Any, float]]:
    folder = out / arm
    if not folder.is_dir():
        return {}
    scores, _ = scores_from_records(_record_files(folder))
    return scores
