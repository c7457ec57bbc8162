"""Official ARC-AGI-3 scoring computed from run records.

The same arithmetic as `arc_agi.scorecard` (checked against it in tests):

* a completed level scores min(115, 100·(baseline / actions)²), where `actions` are all
  actions spent on that level, failed attempts and RESETs included;
* a game is the level-index-weighted mean over *all* its levels (weight 1 for level 1, 2
  for level 2, …; uncompleted levels score 0), capped at the weight share of the completed
  levels (so 115% efficiency cannot buy unplayed levels);
* the total is the mean over games. Percent units, like the leaderboard (Duck: 1.60).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from duck.play.record import Record, read_records

LEVEL_CAP = 115.0


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

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("game_id")
        if d["error"] is None:
            d.pop("error")
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
    return GameScore(
        game_id=rec.game_id,
        score=game_score(baselines, level_actions),
        levels=levels,
        levels_total=int(rec.header.get("win_levels") or len(baselines)),
        actions=total,
        level_actions=level_actions,
        level_scores=[level_score(b, a) for b, a in zip(baselines, level_actions)],
        error=err,
    )


def overall(scores: Iterable[GameScore]) -> float:
    scores = list(scores)
    return sum(s.score for s in scores) / len(scores) if scores else 0.0


def score_json(scores: list[GameScore]) -> dict:
    """The `score.json` document of a run folder."""
    return {"score": overall(scores), "games": {s.game_id: s.to_json() for s in scores}}


def write_score(run_dir: str | Path) -> dict:
    """Recompute `score.json` from the records of a run folder."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    doc = score_json([score_record(r) for r in records])
    toolkit = {}
    for r in records:
        ev = next((e for e in r.events if e["kind"] == "scorecard"), None)
        if ev:
            toolkit[r.game_id] = ev["data"]["score"]
    if toolkit and len(toolkit) == len(records):
        # The toolkit's own per-game scores, kept beside ours so anyone can compare them.
        doc["toolkit_score"] = sum(toolkit.values()) / len(toolkit)
    (run_dir / "score.json").write_text(json.dumps(doc, indent=1))
    return doc
