"""Recorded Duck progress curves (runs.jsonl) and the official per-game score.

Why a module of its own: the simulator must score every completed level exactly as the
competition does ("as recorded": from the actions spent on the level and its human
baseline), and read a run's curve (levels and actions at any elapsed second, turn
boundaries) without each caller re-deriving them from the JSON.

Units: scores are percentages, like `final_score` in runs.jsonl (a game at human parity
on every level scores 100). Times are seconds since the game-run's timer started.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# Per-level score cap of the official formula: min(1.15, (baseline / actions)^2).
LEVEL_CAP = 1.15
# The late action rate (used to extend actions past the recorded end) is measured over the
# last LATE_WINDOW_S seconds of a run: the Duck slowed down as its history grew, and what
# matters for an extension is how fast the run was acting when the recording stopped.
LATE_WINDOW_S = 900.0
# Floor of that rate, actions per second (0.5 per minute): a run that idled through its last
# 15 minutes still acts again eventually, and a zero rate would give a later level 0 actions.
MIN_RATE = 0.5 / 60


def level_score(baseline: int, actions: int) -> float:
    """Official per-level score: min(1.15, (baseline / actions)^2); 0 actions scores 0."""
    if actions <= 0:
        return 0.0
    return min(LEVEL_CAP, (baseline / actions) ** 2)


def game_score(baselines: Sequence[int], level_actions: Sequence[int]) -> float:
    """Score of one game in percent, from the actions spent on each *completed* level.

    Level i (1-based) has weight i; the weighted sum is capped at the weight of the completed
    levels (so 1.15 on one level cannot make up for another) and divided by the weight of
    all levels. This reproduces all 250 recorded `final_score` values of passes 0-9.
    """
    n = len(baselines)
    total_weight = n * (n + 1) / 2
    done = len(level_actions)
    s = sum((i + 1) * level_score(baselines[i], a) for i, a in enumerate(level_actions))
    return 100.0 * min(s, done * (done + 1) / 2) / total_weight


@dataclass(frozen=True)
class Run:
    """One recorded game-run: its progress curve and its level completions."""

    game_id: str
    pass_: int
    baselines: tuple[int, ...]
    times: tuple[float, ...]  # turn header times (then the end entry)
    actions: tuple[int, ...]  # actions executed before each turn
    end: float  # time of the last progress entry: the recorded curve stops here
    level_times: tuple[float, ...]  # elapsed seconds of the i-th level completion
    level_actions: tuple[int, ...]  # cumulative action number that completed level i
    actions_per_level: tuple[int, ...]
    final_score: float

    @property
    def total_levels(self) -> int:
        return len(self.baselines)

    def levels_at(self, t: float) -> int:
        """Levels completed by time t."""
        return bisect_right(self.level_times, t)

    def actions_at(self, t: float) -> int:
        """Actions executed by time t (turn headers, refined by level-completing actions)."""
        i = bisect_right(self.times, t) - 1
        a = self.actions[i] if i >= 0 else 0
        k = self.levels_at(t)
        return max(a, self.level_actions[k - 1]) if k else a

    def level_start(self, levels: int) -> tuple[float, int] | None:
        """(time, action number) at which the run had just completed `levels` levels."""
        if levels == 0:
            return 0.0, 0
        if levels > len(self.level_times):
            return None
        return self.level_times[levels - 1], self.level_actions[levels - 1]

    def next_turn_after(self, t: float) -> float:
        """First turn boundary strictly after t (the run's end if none)."""
        i = bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else self.end

    def late_rate(self) -> float:
        """Actions per second over the last LATE_WINDOW_S seconds, floored at MIN_RATE."""
        t0 = max(0.0, self.end - LATE_WINDOW_S)
        rate = (self.actions_at(self.end) - self.actions_at(t0)) / max(1.0, self.end - t0)
        return max(MIN_RATE, rate)

    def recomputed_score(self) -> float:
        """The score from `level_actions` and the baselines (checked against final_score)."""
        per_level = [b - a for a, b in zip((0,) + self.level_actions, self.level_actions)]
        return game_score(self.baselines, per_level)


def load_baselines(path: Path) -> dict[str, tuple[int, ...]]:
    """Human baselines per game id, from public-games.json or an environments folder."""
    path = Path(path)
    rows: Iterable[dict]
    if path.is_dir():
        rows = [json.loads(p.read_text()) for p in sorted(path.glob("**/metadata.json"))]
    else:
        rows = json.loads(path.read_text())
    return {r["game_id"]: tuple(int(x) for x in r["baseline_actions"]) for r in rows}


def default_baselines_path() -> Path:
    """The repo's environment_files/ when fetched, else ../shared/public-games.json."""
    root = Path(__file__).resolve().parents[1]
    for p in (root / "environment_files", root.parent / "shared" / "public-games.json"):
        if p.exists():
            return p
    raise FileNotFoundError("no baselines: pass --baselines (public-games.json or a games folder)")


def load_runs(path: Path, baselines: dict[str, tuple[int, ...]]) -> list[Run]:
    """Read runs.jsonl into Run objects (sorted by game, then pass, as in the file)."""
    runs = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        prog = r["progress"]
        lcs = sorted(r["level_completions"], key=lambda c: c["level"])
        runs.append(
            Run(
                game_id=r["game_id"],
                pass_=int(r["pass"]),
                baselines=baselines[r["game_id"]],
                times=tuple(float(p[0]) for p in prog),
                actions=tuple(int(p[1]) for p in prog),
                end=float(prog[-1][0]),
                level_times=tuple(float(c["elapsed_seconds"]) for c in lcs),
                level_actions=tuple(int(c["action_num"]) for c in lcs),
                actions_per_level=tuple(int(a) for a in r["actions_per_level"]),
                final_score=float(r["final_score"]),
            )
        )
    return runs


def check_scores(runs: Sequence[Run], tol: float = 1e-6) -> tuple[int, int, float]:
    """(agreeing runs, all runs, largest |recomputed - recorded|) of the score recompute."""
    diffs = [abs(r.recomputed_score() - r.final_score) for r in runs]
    return sum(d <= tol for d in diffs), len(diffs), max(diffs, default=0.0)
