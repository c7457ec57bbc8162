"""Seeds and spreads derived from names are the same in every process (duck/seeds.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from duck.lab.ab.play import arm_order
from duck.play.session import game_seed
from duck.seeds import stable_hash


def test_the_same_numbers_in_other_processes_whatever_their_hash_seed():
    code = ("from duck.seeds import stable_hash; from duck.play.session import game_seed; "
            "print(stable_hash('ls20-0c556536', 3), game_seed(7, 'ls20-0c556536', 2))")
    here = f"{stable_hash('ls20-0c556536', 3)} {game_seed(7, 'ls20-0c556536', 2)}\n"
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed}).stdout
        assert out == here


def test_seeds_spread_over_games_and_passes():
    seeds = {game_seed(0, f"g{i:03d}", p) for i in range(200) for p in range(5)}
    assert len(seeds) == 1000  # no collisions among a run's games and passes
    assert game_seed(0, "g001") != game_seed(1, "g001") != game_seed(0, "g001", 1)


def test_ab_pairs_alternate_which_arm_is_queued_first():
    firsts = [arm_order(f"g{i:03d}", p)[0] for i in range(100) for p in range(4)]
    assert set(firsts) == {"a", "b"} and 150 < firsts.count("a") < 250
    assert arm_order("g001", 0) == arm_order("g001", 0)
