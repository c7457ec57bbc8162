"""What the notebook leaves under `kaggle.working_dir`, besides the records and the logs:
the shape of `duck/summary.json` (each step's timing and outcome, the paths found, the
model server's story, the games and their results, the scorecard, every error), the
placeholder `submission.parquet` of an interactive run, and `duck/run.log`.
"""

from __future__ import annotations

import logging
import sys
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


def log_to_file(path: Path, shown: str) -> None:
    """Every log line to `path` (run.log); to the notebook's output, the `shown` logger's
    lines (our steps) and any warning. Once per process."""
    root = logging.getLogger()
    if not any(getattr(h, "_duck_kaggle", False) for h in root.handlers):
        fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        fh = logging.FileHandler(path)
        sh = logging.StreamHandler(sys.stdout)  # the notebook's output: our steps, and trouble
        sh.addFilter(lambda r: r.name == shown or r.levelno >= logging.WARNING)
        for h in (fh, sh):
            h.setFormatter(fmt)
            h._duck_kaggle = True  # type: ignore[attr-defined]
            root.addHandler(h)
        root.setLevel(logging.INFO)
        logging.getLogger("arc_agi").setLevel(logging.WARNING)
        logging.getLogger("httpx").setLevel(logging.WARNING)
