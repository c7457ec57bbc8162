"""Recorded Duck progress curves (runs.jsonl) and the games' human baselines.

The hazard model (devkit.simulator.extend) reads the runs' level times; `duck simulate` checks the
official score (duck.play.scoring.game_score, from the actions spent on each level and its
human baseline) against the recorded `final_score` of every run.

Units: scores are percentages, like `final_score` in runs.jsonl (a game at human parity
on every level scores 100). Times are seconds since the game-run's timer started.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from duck.paths import PUBLIC_GAMES, SHARED


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
    for p in (PUBLIC_GAMES, SHARED / "public-games.json"):
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
