"""Shared fixtures: the bundled games, the public games when present, a fresh run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "tests" / "games"
BROKEN = ROOT / "tests" / "fixtures" / "broken_games"
PUBLIC = ROOT / "environment_files"


def solutions() -> dict[str, list[list[list[int]]]]:
    """game_id -> per-level winning action lists, from each bundled game's solution.json."""
    out = {}
    for meta in sorted(BUNDLED.rglob("metadata.json")):
        sol = meta.parent / "solution.json"
        if sol.exists():
            out[json.loads(meta.read_text())["game_id"]] = json.loads(sol.read_text())["levels"]
    return out


@pytest.fixture
def bundled() -> Path:
    return BUNDLED


@pytest.fixture
def public() -> Path:
    if not any(PUBLIC.rglob("metadata.json")):
        pytest.skip("public games not fetched into environment_files/")
    return PUBLIC


@pytest.fixture
def games_with_broken(tmp_path: Path) -> Path:
    """The bundled games plus a game whose module raises on construction."""
    dst = tmp_path / "games"
    shutil.copytree(BUNDLED, dst)
    shutil.copytree(BROKEN, dst, dirs_exist_ok=True)
    return dst
