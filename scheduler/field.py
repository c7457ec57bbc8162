"""`field`: Franzen's slot gate and priority as published (../shared/FIELD.md §3).

    P = (A + B) * C
    A = l * (25 / (25 + a))^2 * 55 / (N (N + 1) / 2)
    B = 8 / 7 / 5 / 0 for >= 3 / 2 / 1 / 0 levels left after this one, faded to 0 over the
        last 20% of the time
    C = 0.25 * 2^-(a / 115)^2 + 0.75 * 2^-(t / 62,000)^2

l is the level being played (1-based), a and t the actions and generated tokens spent on it,
N the game's levels clipped to 6-10. A is the level's share of the game's score, discounted
for the actions it already cost (the official score falls with actions); B the value of the
levels it opens; C the chance the level is still completed, a Gaussian fall-off Franzen fitted
on 725 level attempts (557 completed). A game keeps its slot until a trim, a level change or
its end; the free slot then goes to the waiting game of highest P. No preemption: that is
the published scheduler, the baseline the other policies must beat.
"""

from __future__ import annotations

from typing import Sequence

from duck.config import SchedulerConfig

from .state import GatePolicy, GameState

ACTION_SCALE = 25.0  # A: (25 / (25 + a))^2
A_SCALE = 55.0
BONUS = {3: 8.0, 2: 7.0, 1: 5.0, 0: 0.0}  # by levels left after this one (3 = three or more)
BONUS_FADE = 0.2  # B falls to 0 over this last share of the time
C_ACTION_WEIGHT = 0.25
C_ACTIONS = 115.0
C_TOKENS = 62_000.0
LEVELS_CLIP = (6, 10)


def chance(actions: float, tokens: float) -> float:
    """C: the published chance that a level is still completed after `actions` and `tokens`."""
    return (C_ACTION_WEIGHT * 2.0 ** -((actions / C_ACTIONS) ** 2)
            + (1 - C_ACTION_WEIGHT) * 2.0 ** -((tokens / C_TOKENS) ** 2))


def priority(level: int, actions: float, tokens: float, total_levels: int, now_share: float) -> float:
    """P for a game on `level` (1-based) of `total_levels`, at `now_share` of the time (0-1)."""
    n = min(max(total_levels, LEVELS_CLIP[0]), LEVELS_CLIP[1])
    a = level * (ACTION_SCALE / (ACTION_SCALE + actions)) ** 2 * A_SCALE / (n * (n + 1) / 2)
    left = max(0, total_levels - level)
    fade = min(1.0, max(0.0, (1.0 - now_share) / BONUS_FADE))
    b = BONUS[min(left, 3)] * fade
    return (a + b) * chance(actions, tokens)


class FieldPolicy(GatePolicy):
    name = "field"

    def __init__(self, config: SchedulerConfig | None = None, margin_s: float = 0.0):
        super().__init__(config, margin_s)
        self.config = self.scheduler.field

    def priority(self, g: GameState, now: float, end_by: float, games: Sequence[GameState]) -> float:
        n = g.total_levels or self.config.levels_when_unknown
        return priority(g.level, g.level_actions, g.level_tokens, n, now / end_by if end_by > 0 else 1.0)
