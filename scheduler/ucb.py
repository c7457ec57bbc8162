"""`ucb`: weighted levels per generated token with an exploration bonus, in slices.

Siriki's scheduler (FIELD.md §3: 16 slots, 2,400 s slices, UCB on weighted levels per
generated token), rebuilt on tokens: a game's reward is the score share of the levels it
completed (level l of N weighs l / (N (N + 1) / 2)), counted per `unit_tokens` of generated
tokens (a "pull"); its index is mean + exploration * sqrt(ln(all pulls) / its pulls) (UCB1). A
game holds its slot for a slice of `slice_tokens` (then it is preempted if a waiting game's
index is higher), and gives it up at its trims and level changes too; an unplayed game's
index is infinite.
"""

from __future__ import annotations

import math
from typing import Sequence

from duck.config import SchedulerConfig

from .state import GatePolicy, GameState


def weighted_levels(levels: int, total_levels: int) -> float:
    """The score share of `levels` completed levels of `total_levels`, at par."""
    n = max(total_levels, levels, 1)
    return (levels * (levels + 1) / 2) / (n * (n + 1) / 2)


class UcbPolicy(GatePolicy):
    name = "ucb"

    def __init__(self, config: SchedulerConfig | None = None, margin_s: float = 0.0):
        super().__init__(config, margin_s)
        self.config = self.scheduler.ucb
        self._total = 2.0

    def prepare(self, now: float, end_by: float, games: Sequence[GameState]) -> None:
        self._total = max(2.0, sum(self._pulls(x) for x in games if x.played))

    def _pulls(self, g: GameState) -> float:
        return max(g.tokens, self.config.unit_tokens) / self.config.unit_tokens

    def priority(self, g: GameState, now: float, end_by: float, games: Sequence[GameState]) -> float:
        if not g.played:
            return math.inf
        n = g.total_levels or self.scheduler.field.levels_when_unknown
        pulls = self._pulls(g)
        mean = weighted_levels(g.levels, n) / pulls
        return mean + self.config.exploration * math.sqrt(math.log(self._total) / pulls)

    def should_yield(self, g, best_waiting, now, end_by, games) -> bool:
        return g.stint_tokens >= self.config.slice_tokens and best_waiting > self.priority(g, now, end_by, games)

    def recheck_at(self, g: GameState) -> int | None:
        """The next slice boundary (a slice that ended with nobody better waiting runs on)."""
        k = g.stint_tokens // self.config.slice_tokens + 1
        return g.stint_tokens0 + k * self.config.slice_tokens
