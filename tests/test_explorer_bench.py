"""The explorer benchmark (devkit/bench/explorer.py): jobs in subprocesses, a baseline arm
played from a git ref through a temporary worktree, a wall-clock cap per game.

Real subprocesses, real git, the bundled games; small budgets to stay fast.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from devkit.bench.explorer import main, paired, summarize
from devkit.bench.explorer_arms import ROOT
from duck.play.record import read_record


def _worktrees() -> set[str]:
    """The paths of the repository's worktrees (without their commits: other checkouts of the
    same repository may commit while the test runs)."""
    out = subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True).stdout
    return {line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")}


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
    assert doc["paired"] == {"seeds": 1, "score_diff": 0.0, "score_diff_sem": None,
                             "levels_diff": 0, "levels_diff_sem": None}
    assert not {p for p in _worktrees() - before if "bench-baseline-" in p}  # the temporary worktree is gone


def _slow_copy_of_zc01(bundled, folder):
    """zc01 as game zh01 whose every step sleeps 0.5 s: 200 actions cannot finish inside the cap."""
    src = next((bundled / "zc01").iterdir())
    dst = folder / "zh01" / src.name
    dst.mkdir(parents=True)
    code = (src / "zc01.py").read_text().replace("class Zc01(", "class Zh01(")
    code = code.replace("    def step(self) -> None:\n",
                        "    def step(self) -> None:\n        __import__('time').sleep(0.5)\n", 1)
    (dst / "zh01.py").write_text(code)
    meta = json.loads((src / "metadata.json").read_text())
    meta.update(game_id="zh01-" + src.name, local_dir=str(dst))
    (dst / "metadata.json").write_text(json.dumps(meta))


def test_a_game_over_its_wall_clock_cap_is_reported_and_the_others_go_on(bundled, tmp_path, capsys):
    games = tmp_path / "games"
    shutil.copytree(bundled / "zs01", games / "zs01")
    _slow_copy_of_zc01(bundled, games)
    rc = main(["--games", str(games), "--seeds", "0", "--max-actions", "200", "--workers", "2",
               "--game-seconds", "30", "--out", str(tmp_path / "run")])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    o = doc["overall"]
    # 200 steps of 0.5 s: killed at 30 s; zs01 (a few seconds alone) has room on a loaded machine
    assert o["timeouts"] == ["zh01-00000001 seed 0"]
    assert o["game_seconds"] == 30
    assert doc["games"]["zs01-00000001"]["seeds"]["0"]["levels"] >= 1  # played on, unharmed
    # the killed game's record holds its actions up to the kill, scored as it stands
    rec = read_record(tmp_path / "run" / "current" / "seed0" / "records" / "zh01-00000001.jsonl")
    assert 5 <= len(rec.actions) < 200


def _seed_doc(scores: dict[str, float], levels: dict[str, int]) -> dict:
    return {"games": {g: {"score": scores[g], "levels": levels[g], "level_actions": [10] * levels[g]}
                      for g in scores}, "whole_game_resets": 0}


def test_seed_spread_and_paired_differences_are_reported():
    # two seeds, two games: seed scores 2.0 and 4.0 (mean over games), levels 2 and 4
    cur = summarize({0: _seed_doc({"a": 4.0, "b": 0.0}, {"a": 2, "b": 0}),
                     1: _seed_doc({"a": 4.0, "b": 4.0}, {"a": 2, "b": 2})},
                    [0, 1], [], 100, 1.0)
    o = cur["overall"]
    assert o["seed_scores"] == {"0": 2.0, "1": 4.0} and o["spread"] == 2.0
    assert o["score_sem"] == 1.0  # stdev sqrt(2) / sqrt(2 seeds)
    base = summarize({0: _seed_doc({"a": 1.0, "b": 0.0}, {"a": 1, "b": 0}),
                      1: _seed_doc({"a": 4.0, "b": 0.0}, {"a": 2, "b": 0})},
                     [0, 1], [], 100, 1.0)
    # per-seed differences: score 1.5 and 2.0, levels 1 and 2
    assert paired(cur, base) == {"seeds": 2, "score_diff": 1.75, "score_diff_sem": 0.25,
                                 "levels_diff": 1.5, "levels_diff_sem": 0.5}
    one = summarize({3: _seed_doc({"a": 1.0}, {"a": 1})}, [3], [], 100, 1.0)
    assert one["overall"]["score_sem"] is None
