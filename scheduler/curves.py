"""Recorded Duck progress curves (runs.jsonl) and the official per-game score.

Why a module of its own: the simulator must score every completed level exactly as the
competition does ("as recorded": from the actions spent on the level and its human
baseline); the hazard model (scheduler.extend) reads the runs' level times.

Units: scores are percentages, like `final_score` in runs.jsonl (a game at human parity
on every level scores 100). Times are seconds since the game-run's timer started.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# Per-level score cap of the official formula: min(1.15, (baseline / actions)^2).
LEVEL_CAP = 1.15


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
    """One recorded game-run: when it completed its levels, where its recording ends."""

    game_id: str
    pass_: int
    baselines: tuple[int, ...]
    end: float  # time of the last progress entry: the recorded curve stops here
    level_times: tuple[float, ...]  # elapsed seconds of the i-th level completion
    final_score: float


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
                end=float(prog[-1][0]),
                level_times=tuple(float(c["elapsed_seconds"]) for c in lcs),
                final_score=float(r["final_score"]),
            )
        )
    return runs
