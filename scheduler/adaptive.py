"""`adaptive`: ours, on generated tokens and actions per level: expected score per token.

A waiting game's priority is what its next tokens are expected to earn:

    value(level, actions on it) * chance(tokens, actions on it) / expected tokens still to spend on it

value is the level's share of the game's score times what the level can still make (past
`par_actions` actions it falls as (par_actions / actions)^2); the cost is what is left of the
level's median tokens (`level_tokens`), at least a quarter of it; the chance falls from 1 at the
median to `stalled_chance` at `stall_factor` times it (or at `stall_actions`), and is cut when the
run's time left cannot pay the cost. Sunk tokens never count, only what is left.

A running game keeps its slot; stalled past `min_level_tokens`, it is preempted when a waiting game
ranks `preempt_ratio` times above it. Each term and its source: docs/scheduler.md, "The adaptive policy".
"""

from __future__ import annotations

from typing import Sequence

from duck.config import SchedulerConfig

from .state import GatePolicy, GameState

# A stalled running game is looked at again this often (tokens), not at every reply.
RECHECK_TOKENS = 4096


class AdaptivePolicy(GatePolicy):
    name = "adaptive"

    def __init__(self, config: SchedulerConfig | None = None, margin_s: float = 0.0):
        super().__init__(config, margin_s)
        self.config = self.scheduler.adaptive
        self._horizon = float("inf")

    def median(self, level: int) -> float:
        t = self.config.level_tokens
        return float(t[min(level, len(t)) - 1])

    def stalled(self, g: GameState) -> bool:
        c = self.config
        return g.level_tokens >= c.stall_factor * self.median(g.level) or g.level_actions >= c.stall_actions

    def prepare(self, now: float, end_by: float, games: Sequence[GameState]) -> None:
        """The tokens one slot can still generate, at the run's pace so far (inf before any)."""
        made = sum(g.tokens for g in games)
        slots = max(1, sum(g.status == "running" for g in games))
        self._horizon = float("inf") if now <= 0 or made <= 0 else made / now / slots * max(0.0, end_by - now)

    def priority(self, g: GameState, now: float, end_by: float, games: Sequence[GameState]) -> float:
        c = self.config
        n = g.total_levels or self.scheduler.field.levels_when_unknown
        m, t = self.median(g.level), g.level_tokens
        value = g.level / (n * (n + 1) / 2) * min(1.0, (c.par_actions / max(1, g.level_actions)) ** 2)
        fresh = 1.0 if t <= m else max(0.0, 1 - (t - m) / (max(1e-9, c.stall_factor - 1) * m))
        fresh *= max(0.0, 1 - g.level_actions / c.stall_actions)
        chance = c.stalled_chance + (1 - c.stalled_chance) * fresh
        cost = max(m - t, m / 4)
        chance *= min(1.0, self._horizon / cost)
        return value * chance / cost

    def should_yield(self, g, best_waiting, now, end_by, games) -> bool:
        c = self.config
        if not c.preempt or g.level_tokens < c.min_level_tokens or not self.stalled(g):
            return False
        return best_waiting > c.preempt_ratio * self.priority(g, now, end_by, games)

    def recheck_at(self, g: GameState) -> int | None:
        """When the running game would count as stalled (then at every further reply)."""
        c = self.config
        if not c.preempt:
            return None
        at = max(c.min_level_tokens, int(c.stall_factor * self.median(g.level))) + g.level_tokens0
        return at if at > g.tokens else g.tokens + RECHECK_TOKENS
