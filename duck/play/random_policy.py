"""The floor every policy must beat: uniformly random valid actions."""

from __future__ import annotations

import random

from duck.game.actions import RESET, Action
from duck.play.session import Session, game_seed


class RandomPolicy:
    """Uniform over the offered actions; clicks anywhere on the board; RESET only after
    GAME_OVER (the one action that does anything then)."""

    name = "random"
    yields_in_step = True  # acts from its own thread: its slot yield points are in Session.step

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def play(self, session: Session) -> None:
        rng = random.Random(game_seed(self.seed, session.game.game_id))
        while True:
            obs = session.obs
            if obs.state == "GAME_OVER":
                session.step(RESET)
                continue
            ids = [a for a in obs.available_actions if a != 0] or [1]
            a = rng.choice(ids)
            session.step(Action.click(rng.randrange(64), rng.randrange(64)) if a == 6 else Action(a))
