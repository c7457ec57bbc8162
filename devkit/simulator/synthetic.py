"""The synthetic curve set: games with the field's per-level token medians and completion
rate (FIELD.md §3), for an agent like the field's rather than the Duck.

Per game: a public game's levels and human baselines (drawn uniformly from the 25), and a
difficulty z ~ N(0, 1). Per level, in order (a level is reached only once the one before is
completed): the attempt completes with probability sigmoid(logit(Q_COMPLETE) + GAME_SPREAD * z);
a completing attempt takes a lognormal number of generated tokens around the level's median
(TOKEN_SIGMA) and ACTION_RATIO of the level's human baseline in actions (times a lognormal of
ACTION_SIGMA), its actions accruing evenly over its tokens; an attempt that never completes
acts at the pace of a hypothetical completion. Turn sizes are drawn from the Duck's recorded
turns (devkit.simulator.traces.pooled_turns): only the granularity of yields and stops depends
on them. The constants' sources and what they imply: docs/scheduler.md, "The simulator".
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .trajectories import Turn

LEVEL_TOKENS = (27_000, 51_000, 49_000, 56_000, 56_000, 67_000)  # FIELD.md §3, the last repeats
Q_COMPLETE = 557 / 725
GAME_SPREAD = 1.0
TOKEN_SIGMA = 0.3
ACTION_RATIO = 0.75
ACTION_SIGMA = 0.5


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


class SyntheticGame:
    def __init__(self, slot: int, name: str, baselines: Sequence[int], turns: Sequence[tuple[int, int]], seed: int):
        self.game_id = f"{slot:03d}:{name}"
        self.baselines = tuple(baselines)
        self.turns = turns
        self.rng = np.random.default_rng(seed)
        z = float(self.rng.normal())
        self.q = 1 / (1 + math.exp(-(_logit(Q_COMPLETE) + GAME_SPREAD * z)))
        self.level_actions: list[int] = []
        self.levels = self.actions = 0
        self._new_level()

    def _new_level(self) -> None:
        rng, lv = self.rng, self.levels
        m = LEVEL_TOKENS[min(lv, len(LEVEL_TOKENS) - 1)]
        self.t_need = m * math.exp(TOKEN_SIGMA * float(rng.normal()))
        self.a_need = max(1.0, ACTION_RATIO * self.baselines[lv] * math.exp(ACTION_SIGMA * float(rng.normal())))
        self.completes = bool(rng.random() < self.q)
        self.t_level, self.a0 = 0.0, self.actions

    def next_turn(self) -> Turn | None:
        if self.levels >= len(self.baselines):
            return None
        gen, growth = self.turns[int(self.rng.integers(len(self.turns)))]
        self.t_level += gen
        if self.completes and self.t_level >= self.t_need:
            self.actions = self.a0 + int(round(self.a_need))
            self.level_actions.append(max(1, self.actions - self.a0))
            self.levels += 1
            if self.levels < len(self.baselines):
                self._new_level()
        else:
            self.actions = self.a0 + int(self.a_need * self.t_level / self.t_need)
        return gen, growth, self.actions, self.levels


def draw_synthetic(baselines: dict[str, tuple[int, ...]], turns: Sequence[tuple[int, int]], seed: int,
                   n_games: int) -> list[SyntheticGame]:
    """A set of `n_games` synthetic games, all from the seed alone."""
    names = sorted(baselines)
    rng = np.random.default_rng(10_000_019 + seed)
    out = []
    for slot in range(n_games):
        name = names[int(rng.integers(len(names)))]
        out.append(SyntheticGame(slot, name, baselines[name], turns, int(rng.integers(2**31))))
    return out

