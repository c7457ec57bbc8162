"""The policies `duck play` knows, by name. Each plays through a `Session`."""

from __future__ import annotations

import random
import zlib
from typing import Any

from duck.game.actions import RESET, Action
from duck.play.session import Policy, Session


def game_seed(seed: int, game_id: str, pass_: int = 0) -> int:
    """A seed per (run seed, game, pass) that is stable across processes and Pythons."""
    return zlib.crc32(f"{seed}:{game_id}:{pass_}".encode())


class RandomPolicy:
    """Uniform over the offered actions; clicks anywhere on the board; RESET only after
    GAME_OVER (the one action that does anything then). The floor every policy must beat."""

    name = "random"

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


def make_policy(name: str, seed: int = 0, **options: Any) -> Policy:
    if name == "random":
        return RandomPolicy(seed)
    if name == "explorer":
        from duck.explorer.policy import Explorer
        return Explorer(seed=seed, **options)
    if name == "llm":
        from duck.agent.loop import AgentPolicy
        return AgentPolicy(seed=seed, **options)
    raise ValueError(f"unknown policy {name!r}: random, explorer or llm")
