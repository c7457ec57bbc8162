"""What a policy sees and says, and the slot gate the token policies share: `GameState` (one per
game), `Decision` (what to do now), the `Policy` protocol, and `GatePolicy` (slots go to the
waiting games of highest `priority`, every game gets a first turn early, and everything ends
`margin_s` before `budget_end`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence

from duck.config import SchedulerConfig

Status = Literal["queued", "running", "waiting", "done"]


@dataclass
class GameState:
    """What a policy knows about one game (times are seconds since the run started)."""

    game_id: str
    status: Status = "queued"  # queued: never played; waiting: yielded, resumable
    total_levels: int | None = None  # the game's levels, when it says
    started_at: float | None = None  # first given a slot
    levels: int = 0
    actions: int = 0
    tokens: int = 0  # generated tokens, all requests
    level_actions0: int = 0  # actions when the current level began
    level_tokens0: int = 0  # tokens when the current level began
    stint_tokens0: int = 0  # tokens when it was given its current slot
    yields: int = 0
    stop_requested: bool = False  # a stop was sent; the worker has not returned yet
    preempt_requested: bool = False  # it yields at its next model request
    parked: bool = False  # waiting for the model server to come back: granted nothing until then

    @property
    def level(self) -> int:
        """The level being played, 1-based."""
        return self.levels + 1

    @property
    def level_actions(self) -> int:
        return self.actions - self.level_actions0

    @property
    def level_tokens(self) -> int:
        return self.tokens - self.level_tokens0

    @property
    def stint_tokens(self) -> int:
        return self.tokens - self.stint_tokens0

    @property
    def played(self) -> bool:
        return self.started_at is not None

    def progress(self, *, levels: int, actions: int, tokens: int) -> bool:
        """Apply a progress report; True when a level was completed."""
        self.actions, self.tokens = max(self.actions, actions), max(self.tokens, tokens)
        if levels > self.levels:
            self.levels = levels
            self.level_actions0, self.level_tokens0 = self.actions, self.tokens
            return True
        return False

    def grant(self, now: float) -> None:
        if self.started_at is None:
            self.started_at = now
        self.status, self.stint_tokens0 = "running", self.tokens
        self.preempt_requested = False

    def release(self) -> None:
        """It gave up its slot at a yield point (or a preemption landed)."""
        self.status, self.preempt_requested = "waiting", False
        self.yields += 1


@dataclass
class Decision:
    """What to do now.

    `start`: games (queued or waiting) to give a slot, best first; the caller grants as many
    as there are free slots. `preempt`: running games to yield at their next model request.
    `stop`: games to end for good. `deadlines`: the hard end of every game in `start`.
    `wake_at`: ask again by then even if nothing happens; `recheck`: ask again when a running
    game's generated tokens reach this count (the simulator asks only then, not every turn).
    """

    start: list[str] = field(default_factory=list)
    preempt: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    deadlines: dict[str, float] = field(default_factory=dict)
    wake_at: float | None = None
    recheck: dict[str, int] = field(default_factory=dict)


class Policy(Protocol):
    name: str

    def decide(
        self, now: float, budget_end: float, slots: int, games: Sequence[GameState]
    ) -> Decision: ...


class GatePolicy:
    """The slot gate shared by `field`, `ucb` and `adaptive`: subclasses rank games
    (`priority`, higher first) and may preempt running ones (`should_yield`)."""

    name = "gate"

    def __init__(self, config: SchedulerConfig | None = None, margin_s: float = 0.0):
        if margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {margin_s}")
        self.scheduler = config or SchedulerConfig()
        self.margin_s = margin_s

    # -- what subclasses say ------------------------------------------------------------------
    def prepare(self, now: float, end_by: float, games: Sequence[GameState]) -> None:
        """Compute what every `priority` of this decision shares (once per decision)."""

    def priority(self, g: GameState, now: float, end_by: float, games: Sequence[GameState]) -> float:
        raise NotImplementedError

    def should_yield(self, g: GameState, best_waiting: float, now: float, end_by: float,
                     games: Sequence[GameState]) -> bool:
        """Preempt running game `g`, given the best waiting game's priority? (default: never)"""
        return False

    def recheck_at(self, g: GameState) -> int | None:
        """A running game's token count at which to look again (None: at its yield points)."""
        return None

    # -- the gate -------------------------------------------------------------------------------
    def first_turn_done(self, g: GameState) -> bool:
        return g.actions > 0 or g.tokens >= self.scheduler.first_turn_tokens

    def decide(self, now, budget_end, slots, games):
        end_by = budget_end - self.margin_s
        d = Decision()
        if now >= end_by:  # the margin: everything ends, paused games included
            d.stop = [g.game_id for g in games if g.status in ("running", "waiting") and not g.stop_requested]
            return d
        running = [g for g in games if g.status == "running"]
        active = [g for g in running if not g.stop_requested]
        queued = [g for g in games if g.status == "queued"]
        waiting = [g for g in games if g.status == "waiting"]
        free = slots - len(running)
        self.prepare(now, end_by, games)
        if self.scheduler.first_turns and queued:
            # Unplayed games first, in order; a game past its first turn makes room for them.
            order = queued + sorted(waiting, key=lambda g: -self.priority(g, now, end_by, games))
            need = len(queued) - max(0, free) - sum(g.preempt_requested for g in active)
            done = sorted((g for g in active if not g.preempt_requested and self.first_turn_done(g)),
                          key=lambda g: -g.stint_tokens)
            d.preempt = [g.game_id for g in done[: max(0, need)]]
            for g in active:
                if not self.first_turn_done(g):
                    d.recheck[g.game_id] = g.tokens + 1  # look again after its next reply
        else:
            ranked = sorted(waiting + queued, key=lambda g: -self.priority(g, now, end_by, games))
            order = ranked
            pending = sum(g.preempt_requested for g in active)
            if ranked and free <= 0 and pending < len(ranked):
                best = self.priority(ranked[0], now, end_by, games)
                cands = [g for g in active if not g.preempt_requested
                         and self.should_yield(g, best, now, end_by, games)]
                d.preempt = [g.game_id for g in cands[: len(ranked) - pending]]
            for g in active:
                r = self.recheck_at(g)
                if r is not None:
                    d.recheck[g.game_id] = r
        for g in order[: max(0, free)]:
            d.start.append(g.game_id)
            d.deadlines[g.game_id] = end_by
        return d
