"""Level 1 of two public games cleared by a hand-written simulator and `plan`, in the real kernel
with the world-model tools, in at most 1.5x the human baseline (metadata.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from duck.play.record import read_record
from world_models.kernel import open_tools_kernel
from world_models.public import LEVEL_1


@pytest.mark.public
@pytest.mark.parametrize("game", sorted(LEVEL_1))
def test_a_simulator_of_level_1_and_plan_clear_it_within_1_5x_the_baseline(public: Path, tmp_path: Path, game):
    kernel, g, path = open_tools_kernel(public, game, tmp_path, max_actions=200, timeout=30)
    try:
        for code in LEVEL_1[game]:
            r = kernel.run(code)
            assert r.kind == "ok", r.text
            assert r.actions, r.stdout
    finally:
        kernel.close()
    assert g.obs.levels_completed == 1 and g.obs.state == "NOT_FINISHED"
    actions = len(read_record(path).actions)
    assert actions <= 1.5 * g.baselines[0], (actions, g.baselines[0])
    print(f"{game}: level 1 in {actions} actions (baseline {g.baselines[0]})")
