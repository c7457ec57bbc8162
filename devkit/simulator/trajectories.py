"""What a simulated game does, turn by turn, whatever the schedule: the Duck curve set.

A trajectory hands the simulator one turn at a time, `(generated tokens, context growth,
actions after the turn, levels completed after the turn)`, or None when the game is over (won,
or its curve ended with no model to extend it). It keeps the actions spent on each completed
level for the official score. How fast the turns come is the simulator's business (the
throughput model), so a game's progress depends only on the tokens it was given.

The Duck set (`DuckGame`): one recorded game-run (devkit.simulator.traces, converted to tokens),
then, past its recorded end when the scenario extends curves, modelled turns: sizes drawn
from the same run's turns, actions at the run's late pace per token, the next level from the
hazard model fitted on the curves in tokens (devkit.simulator.extend.fit_tokens). Draws: a set is
`n_games` games, each a game uniformly from the 25, then one of its passes, plus a private
random stream, all from the seed alone, so every policy plays the same draws for a seed.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from duck.play.scoring import game_score
from .extend import HazardModel
from .traces import TokenRun

Turn = tuple[int, int, int, int]  # generated tokens, context growth, actions after, levels after


class Trajectory(Protocol):
    game_id: str
    baselines: tuple[int, ...]
    level_actions: list[int]  # actions spent on each completed level

    def next_turn(self) -> Turn | None: ...


def score(traj: Trajectory, levels: int) -> float:
    """The official score (percent) of the first `levels` completed levels."""
    return game_score(traj.baselines, traj.level_actions[:levels])


class DuckGame:
    """One recorded Duck run in tokens, extended past its end by the hazard model."""

    def __init__(self, slot: int, run: TokenRun, model: HazardModel | None, seed: int):
        self.game_id = f"{slot:03d}:{run.game_id}"
        self.run, self.model = run, model
        self.baselines = run.baselines
        self.rng = np.random.default_rng(seed)
        self.k = 0
        self.actions = self.levels = 0
        self.level_actions: list[int] = []
        self._done_at = 0  # action number at the last completion
        self._rate = run.late_actions_per_token()
        self._carry = 0.0
        self._tau = 0.0  # tokens since the last level (modelled stretch)
        self._next: float | None = None  # tau of the next modelled level

    def _complete(self, action_num: int) -> None:
        self.level_actions.append(max(1, action_num - self._done_at))
        self._done_at = max(action_num, self._done_at + 1)
        self.levels += 1

    def next_turn(self) -> Turn | None:
        r = self.run
        if self.levels >= r.total_levels:
            return None
        if self.k < len(r.gen):
            k = self.k
            self.k += 1
            self.actions = r.actions[k]
            while self.levels < r.levels[k]:
                self._complete(r.level_actions[self.levels])
            self._tau = 0.0 if self.levels > (r.levels[k - 1] if k else 0) else self._tau + r.gen[k]
            return r.gen[k], r.growth[k], self.actions, self.levels
        if self.model is None:
            return None  # no data (or model) past the recorded end
        j = int(self.rng.integers(len(r.gen)))
        gen, growth = r.gen[j], r.growth[j]
        self._carry += self._rate * gen
        step = int(self._carry)
        self._carry -= step
        self.actions += step
        if self._next is None:
            self._next = self._draw(self._tau)
        self._tau += gen
        if self._tau >= self._next:
            self._complete(self.actions)
            self._tau, self._next = 0.0, None
        return gen, growth, self.actions, self.levels

    def _draw(self, tau0: float) -> float:
        e = float(self.rng.exponential())
        return tau0 + self.model.time_to_next(self.run.game_id, self.levels, tau0, e)


def draw_duck(runs: Sequence[TokenRun], seed: int, n_games: int, model: HazardModel | None) -> list[DuckGame]:
    """A competition-like set from the Duck's runs: per slot a game uniformly, then a pass."""
    pool: dict[str, list[TokenRun]] = {}
    for r in runs:
        pool.setdefault(r.game_id, []).append(r)
    games = sorted(pool)
    rng = np.random.default_rng(seed)
    out = []
    for slot in range(n_games):
        passes = pool[games[int(rng.integers(len(games)))]]
        run = passes[int(rng.integers(len(passes)))]
        out.append(DuckGame(slot, run, model, int(rng.integers(2**31))))
    return out
