"""Folders of the source checkout, for the developer tools only (benchmarks, the rehearsal,
reports, generating the notebook). The production path (games, sandbox, agent, Kaggle run)
never uses them: an installed wheel has no checkout around it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The team's shared data (Duck traces, community games, the Qwen template) sits beside the repo.
SHARED = Path(os.environ.get("DUCK_SHARED_DIR") or REPO.parent / "shared")
PUBLIC_GAMES = REPO / "environment_files"  # fetched, git-ignored
BUNDLED_GAMES = REPO / "tests" / "games"  # our small games, for tests and the demo
