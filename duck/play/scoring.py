"""Official ARC-AGI-3 scoring computed from run records.

The same arithmetic as `arc_agi.scorecard` (checked against it in tests): a completed level
scores min(115, 100·(baseline / actions)²), all actions spent on it counted; a game is the
level-index-weighted mean over all its levels, capped at the weight share of the completed ones;
the total is the mean over games, in percent, like the leaderboard.

`score.json` keeps, beside our score, the toolkit's own scorecard (`toolkit_score`) and flags
every game where the two disagree (`disagrees`), so a record that does not tell the truth cannot
raise a score unnoticed. A run that did not play every game it meant to is `partial` (`missing`,
`unfinished`; `score_missing_as_0` counts a missing game as 0, as the competition does). Every
field: docs/runs.md, "score.json".
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from duck.files import write_whole
from duck.play.record import Record, read_records

LEVEL_CAP = 115.0
# End reasons of a game that did not end by itself: `duck play --resume` plays it again.
SHORT_ENDS = ("stopped", "disk_full")
_DISK_FULL_WORDS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
TOLERANCE = 1e-6  # percent points: ours and the toolkit's differ only by float rounding


def level_score(baseline: int, actions: int) -> float:
    if actions <= 0:
        return 0.0
    return min(LEVEL_CAP, (baseline / actions) ** 2 * 100.0)


def game_score(baselines: list[int], level_actions: list[int]) -> float:
    """`level_actions[i]` = actions spent on completed level i+1 (len = levels completed)."""
    if not baselines:
        return 0.0
    weights = range(1, len(baselines) + 1)
    total_w = sum(weights)
    done = min(len(level_actions), len(baselines))
    total = sum(w * level_score(b, a) for w, b, a in zip(weights, baselines[:done], level_actions[:done]))
    raw = total / total_w
    cap = sum(w for w, b, a in zip(weights, baselines[:done], level_actions[:done])
              if level_score(b, a) > 0) / total_w * 100.0
    return min(raw, cap)


@dataclass
class GameScore:
    game_id: str
    score: float
    levels: int
    levels_total: int
    actions: int
    level_actions: list[int] = field(default_factory=list)
    level_scores: list[float] = field(default_factory=list)
    error: str | None = None
    toolkit_score: float | None = None  # the arc_agi scorecard's score of this game, if recorded
    problems: list[str] = field(default_factory=list)  # lines of its record that were skipped

    @property
    def disagrees(self) -> bool:
        return self.toolkit_score is not None and abs(self.toolkit_score - self.score) > TOLERANCE

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("game_id")
        for k in ("error", "toolkit_score"):
            if d[k] is None:
                d.pop(k)
        if not d["problems"]:
            d.pop("problems")
        if self.disagrees:
            d["toolkit_disagrees"] = True
        return d


def score_record(rec: Record) -> GameScore:
    """Score one record: split its actions into levels at each level completion."""
    baselines = rec.header.get("baselines") or []
    level_actions: list[int] = []
    start, levels = 0, int(rec.header.get("levels", 0))
    for a in rec.actions:
        if a["levels"] > levels:
            # Levels only go up in one play (our Game never sends a whole-game restart).
            level_actions.append(a["i"] - start)
            level_actions.extend([0] * (a["levels"] - levels - 1))
            start, levels = a["i"], a["levels"]
    total = rec.actions[-1]["i"] if rec.actions else 0
    err = next((e["message"] for e in rec.events if e["kind"] == "error"), None)
    card = next((e.get("data") for e in rec.events if e["kind"] == "scorecard"), None)
    toolkit = card.get("score") if isinstance(card, dict) else None
    return GameScore(
        game_id=rec.game_id,
        score=game_score(baselines, level_actions),
        levels=levels,
        levels_total=int(rec.header.get("win_levels") or len(baselines)),
        actions=total,
        level_actions=level_actions,
        level_scores=[level_score(b, a) for b, a in zip(baselines, level_actions)],
        error=err,
        toolkit_score=float(toolkit) if isinstance(toolkit, (int, float)) else None,
        problems=list(rec.problems),
    )


def overall(scores: Iterable[GameScore]) -> float:
    scores = list(scores)
    return sum(s.score for s in scores) / len(scores) if scores else 0.0


def score_json(scores: list[GameScore]) -> dict:
    """The `score.json` document of a run folder."""
    doc: dict = {"score": overall(scores), "games": {s.game_id: s.to_json() for s in scores}}
    toolkit = [s.toolkit_score for s in scores if s.toolkit_score is not None]
    if scores and len(toolkit) == len(scores):
        # The toolkit's own per-game scores, kept beside ours so anyone can compare them.
        doc["toolkit_score"] = sum(toolkit) / len(toolkit)
    doc["disagrees"] = [s.game_id for s in scores if s.disagrees]
    problems = {s.game_id: s.problems for s in scores if s.problems}
    if problems:
        doc["record_problems"] = problems
    return doc


def record_finished(rec: Record) -> bool:
    """Whether a game's record ends where the game ended (its budget, a win, the policy done,
    a game error), rather than where the run was cut: no end line (killed), stopped by Ctrl-C
    or a full disk, or an error that was the disk's."""
    if rec.end is None or rec.end.get("reason") in SHORT_ENDS:
        return False
    return not any(e.get("kind") == "error" and any(w in str(e.get("message")) for w in _DISK_FULL_WORDS)
                   for e in rec.events)


def _run_info(run_dir: Path) -> dict:
    """The parts of run.json scoring needs (duck.run.info writes it); {} when absent or unreadable."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def score_doc(run_dir: str | Path) -> dict:
    """The `score.json` document of a run folder, with its partial marking, not written."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    scores = [score_record(r) for r in records]
    doc = score_json(scores)
    info = _run_info(run_dir)
    expected = [g for g in info.get("games") or [] if isinstance(g, str)]
    have = {s.game_id for s in scores}
    missing = [g for g in expected if g not in have]
    unfinished = [r.game_id for r in records if not record_finished(r)]
    doc["partial"] = bool(missing or unfinished)
    if missing:
        doc["missing"] = missing
    if unfinished:
        doc["unfinished"] = unfinished
    if doc["partial"]:
        n = len(set(expected) | have)
        doc["score_missing_as_0"] = sum(s.score for s in scores) / n if n else 0.0
    if expected:
        doc["games_expected"] = len(expected)
    if isinstance(info.get("status"), str):
        doc["run_status"] = info["status"]
    if info.get("stopped_by"):
        doc["stopped_by"] = str(info["stopped_by"])  # what stopped the run: Ctrl-C, the spend guard's reason
    return doc


def write_score(run_dir: str | Path) -> dict:
    """Recompute `score.json` from the records of a run folder (one unreadable record is a
    game with an error, never a reason to stop). Raises OSError when it cannot be written."""
    run_dir = Path(run_dir)
    doc = score_doc(run_dir)
    write_whole(run_dir / "score.json", json.dumps(doc, indent=1))  # a full disk leaves no half score.json
    return doc
