"""The composition root: every policy by name, and the model-driven one wrapped in its fallback.

Nothing below this module knows which policies exist. `make_policy("llm", ...)` gives the
agent wrapped in `FallbackPolicy`, so that a game whose model fails (the server keeps
failing, the notebook's health flag says it is down, or the agent raises) goes on with the
explorer from where it stands instead of sitting idle; the agent itself only raises.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

from duck.agent.loop import AgentPolicy
from duck.config import POLICIES, Config, load_config
from duck.explorer.policy import Explorer
from duck.game.source import GameError
from duck.llm.health import ModelHealth
from duck.play.random_policy import RandomPolicy
from duck.play.session import PlayStopped, Policy, Session
from duck.sandbox.host import Kernel
from duck.seeds import stable_hash

MODEL_DOWN = "model_down"  # the PlayStopped reason that hands a game to the fallback


def make_policy(name: str, seed: int = 0, *, config: Config | None = None, model_url: str | list[str] | None = None,
                url_index: int | None = None, pass_: int = 0, health: ModelHealth | None = None,
                kernel_factory: Any = None) -> Policy:
    """The policy `name` for one game. `config` (default: `load_config()`) configures the
    agent and names its fallback (`agent.fallback`, None for none); `model_url` overrides
    `model.urls`; `url_index` picks the endpoint a game starts on (paired A/B units share it);
    `pass_` seeds the model's sampling; `health` is the notebook's model-down flag."""
    if name == "random":
        return RandomPolicy(seed)
    cfg = config or load_config()
    if name == "explorer":
        return Explorer(seed=seed, **cfg.explorer.options)
    if name == "llm":

        if kernel_factory is None and cfg.agent.world_model_tools:
            kernel_factory = world_model_kernel(cfg, seed)

        def agent() -> AgentPolicy:
            return AgentPolicy(seed, cfg, model_url=model_url, url_index=url_index, pass_=pass_,
                               kernel_factory=kernel_factory)

        if cfg.agent.fallback is None:
            return agent()
        return FallbackPolicy(agent, lambda: make_policy(cfg.agent.fallback, seed, config=cfg), health)
    raise ValueError(f"unknown policy {name!r}: {', '.join(POLICIES)}")


def world_model_kernel(cfg: Config, seed: int) -> Any:
    """The kernel factory of the agent with the world-model tools (agent.world_model_tools):
    the tools in the worker, and the explorer their explore(n) hands actions to (the sandbox
    does not know the explorer; duck.sandbox.handoff). Each explore(n) call gets an explorer of
    its own, seeded by the call's number, so that repeated calls do not repeat one another."""

    def factory(session: Session, kernel_config: Any) -> Kernel:
        calls = [0]

        def explore(view: Any) -> None:
            calls[0] += 1
            Explorer(seed=stable_hash(seed, "explore", calls[0]), **cfg.explorer.options).play(view)

        return Kernel(session, kernel_config, tools=True, explore=explore)

    return factory


class FallbackPolicy:
    """The model-driven policy while it works, the fallback (the explorer) from where the game
    stands as soon as it does not: the health flag is set (checked before every action), or the
    model policy raises (ModelDown after repeated failed requests, or a bug)."""

    name = "llm"

    def __init__(self, llm: Callable[[], Policy], fallback: Callable[[], Policy],
                 health: ModelHealth | None = None) -> None:
        self.llm, self.fallback, self.health = llm, fallback, health

    def play(self, session: Any) -> None:
        if self.health is None or self.health.ok():
            try:
                # The next action after the server is marked down ends the model's play.
                with session.stopping_when(self._model_down):
                    self.llm().play(session)
                return
            except PlayStopped as e:
                if e.reason != MODEL_DOWN:
                    raise
                session.event("fallback", "the model server is down: the explorer takes over")
            except GameError:
                raise
            except Exception as e:  # a failing model or a bug must not idle the game
                session.event("fallback", f"the model policy failed ({type(e).__name__}: {e}): "
                                          "the explorer takes over", traceback.format_exc(limit=6))
        else:
            session.event("fallback", "no model server: the explorer plays")
        if session.stop_reason() is None:
            self.fallback().play(session)

    def _model_down(self) -> str | None:
        return MODEL_DOWN if self.health is not None and self.health.down() else None
