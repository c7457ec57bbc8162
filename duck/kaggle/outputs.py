"""What the notebook leaves under `kaggle.working_dir`, besides the records and the logs:
the shape of `duck/summary.json` (each step's timing and outcome, the paths found, the
model server's story, the games and their results, the scorecard, every error), and the
placeholder `submission.parquet` of an interactive run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLACEHOLDER_COLUMNS = ("row_id", "game_id", "end_of_game", "score")


@dataclass
class Step:
    name: str
    started: float
    seconds: float = 0.0
    ok: bool = True
    error: str | None = None


@dataclass
class Summary:
    mode: str
    started_at: float
    budget_s: float
    deadline: float
    steps: list[Step] = field(default_factory=list)
    paths: dict[str, str | None] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    games: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    runner: str = ""
    scorecard: dict[str, Any] = field(default_factory=dict)
    submission: str | None = None
    ended_at: float | None = None
    errors: list[str] = field(default_factory=list)


def write_placeholder_submission(path: Path) -> Path:
    """The one-row file an interactive run leaves so that the notebook can be submitted;
    in the rerun the gateway writes the real one."""
    row = {"row_id": ["1_0"], "game_id": ["1"], "end_of_game": [True], "score": [1]}
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # whichever parquet writer Kaggle's image has: neither is our dependency
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table(row), path)
    except ImportError:
        import pandas as pd
        pd.DataFrame(row).to_parquet(path, index=False)
    return path
