"""The explorer benchmark (duck/bench/explorer.py): jobs in subprocesses, a baseline arm
played from a git ref through a temporary worktree, a wall-clock cap per game.

Real subprocesses, real git, the bundled games; small budgets to stay fast.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from duck.bench.explorer import main
from duck.bench.explorer_arms import ROOT


def _worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                          text=True).stdout


@pytest.mark.slow
def test_baseline_arm_plays_the_same_games_side_by_side(bundled, tmp_path, capsys):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    before = _worktrees()
    rc = main(["--games", str(bundled), "--seeds", "1", "--max-actions", "40", "--workers", "2",
               "--only", "zc01", "zs01", "--baseline", "HEAD", "--out", str(tmp_path / "run")])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["games"]) == {"zc01-00000001", "zs01-00000001"}
    assert set(doc["baseline"]["games"]) == set(doc["games"])
    for arm in (doc, doc["baseline"]):
        o = arm["overall"]
        assert o["whole_game_resets"] == 0 and not o["errors"] and not o["timeouts"]
        assert o["levels"]["1"] >= 1 and o["actions_per_level"] > 0
        assert (tmp_path / "run" / ("current" if arm is doc else "baseline") / "seed1" / "score.json").exists()
    # both arms ran the explorer of one commit on the same games and seed: identical play
    assert doc["games"] == doc["baseline"]["games"]
    assert doc["ratio"]["mean_levels"] == 1.0
    assert _worktrees() == before  # the temporary worktree is gone


def test_a_game_over_its_wall_clock_cap_is_reported_and_the_others_go_on(bundled, tmp_path, capsys):
    rc = main(["--games", str(bundled), "--seeds", "0", "--max-actions", "100000", "--workers", "2",
               "--only", "zb01", "zc01", "--game-seconds", "6", "--out", str(tmp_path / "run")])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    o = doc["overall"]
    assert o["timeouts"] == ["zb01-00000001 seed 0"]  # a move budget: plays until killed
    assert o["game_seconds"] == 6
    assert doc["games"]["zc01-00000001"]["seeds"]["0"]["levels"] >= 1  # won, well inside
