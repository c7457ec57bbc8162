"""The composition root: every policy by name, and the model-driven one wrapped in its fallback.

Nothing below this module knows which policies exist. `make_policy("llm", ...)` gives the
agent wrapped in `FallbackPolicy`, so that a game whose model fails for good (the server is
gone and cannot come back in time, or the agent raises) goes on with the explorer from where
it stands instead of sitting idle; the agent itself only raises. While the server is down
but coming back (the health flag says so: the notebook restarts it, or `duck play` waits
`agent.outage_wait_s` for it) a model game parks instead (`Parking`): its slot freed, its
kernel, conversation and level memory kept, no action played; it resumes with the model.

A user's own policy is a class in one file, `make_policy("path/to/file.py:MyPolicy")`
(`duck play --policy path/to/file.py:MyPolicy`): a subclass of `UserPolicy` that answers
`choose_action(obs)`, or any class with `name` and `play(session)` (duck.play.session.Policy).
It runs in duck's own process (it is the user's code, not the model's: no sandbox).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from duck.config import POLICIES, Config, load_config
from duck.explorer.policy import Explorer
from duck.game.actions import RESET, Action
from duck.game.source import GameError, Observation
from duck.play.random_policy import RandomPolicy
from duck.play.session import PlayStopped, Policy, Session, game_seed

if TYPE_CHECKING:  # the model side is imported when a model plays (the agent brings openai: ~0.6 s)
    from duck.agent.loop import AgentPolicy
    from duck.config import KernelConfig
    from duck.llm.health import ModelHealth
    from duck.sandbox.host import Kernel

__all__ = ["RESET", "Action", "Observation", "UserPolicy", "make_policy", "load_policy_file"]


class PolicyError(ValueError):
    """A user's policy file that cannot be used, said in one line."""


class UserPolicy:
    """The base of a policy a user writes in one file (README, "Your own policy").

    Implement `choose_action(obs)`: given the current `Observation` (`obs.grid`, the board as
    a 64x64 numpy array of colours 0-15; `obs.frames`, every frame of the last action's
    animation; `obs.state`, NOT_FINISHED, WIN or GAME_OVER; `obs.levels_completed`,
    `obs.win_levels`; `obs.available_actions`, ids 1-7, 6 being a click), return the next
    `Action` (`Action(1)`..`Action(7)`, `Action.click(x, y)`, `RESET`) or None to stop.
    The budget (`--max-actions`), Ctrl-C and the record are duck's business: the loop ends
    when they say so. `self.seed` is the run's seed, `self.rng` a `random.Random` seeded per
    game, `self.game_id` the game's id and `self.step_count` the actions sent so far.
    `start(obs)` is called once per game before the first action (default: nothing).
    Set `self.reason` (a short text) in `choose_action` to keep why you chose the action: the
    record keeps it with the action (`info.why`) and the report's player shows it.
    """

    name = ""  # the record's "policy"; "" names it after the file and class
    yields_in_step = True  # acts through Session.step: the scheduler's slot yield points are there
    reason: str | None = None  # why the next action (set in choose_action; kept in the record)

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def start(self, obs: Observation) -> None:
        """Called once per game, on the first board."""

    def choose_action(self, obs: Observation) -> Action | None:
        raise NotImplementedError("a UserPolicy implements choose_action(obs)")

    def play(self, session: Session) -> None:
        import random
        self.game_id = session.game.game_id
        self.rng = random.Random(game_seed(self.seed, self.game_id))
        self.step_count = 0
        self.start(session.obs)
        self.reason = None
        while (action := self.choose_action(session.obs)) is not None:
            if not isinstance(action, Action):
                raise TypeError(f"choose_action returned {action!r}, not an Action (or None to stop)")
            why, self.reason = self.reason, None
            session.step(action, info={"why": str(why)[:500]} if why else None)
            self.step_count = session.game.actions


def load_policy_file(spec: str) -> type:
    """The class `ClassName` of `path/to/file.py:ClassName`, loaded from the file (once per
    process: the module is kept in sys.modules under a name made from its path; its folder is
    on sys.path, so that helpers beside it import). Raises
    PolicyError (one line) for a missing or broken file, a missing class, or one that is
    not a policy."""
    path, _, cls_name = spec.rpartition(":")
    file = Path(path).resolve()
    if not file.is_file():
        raise PolicyError(f"--policy {spec}: no such file {path}")
    mod_name = "duck_user_policy_" + "".join(c if c.isalnum() else "_" for c in str(file))
    module = sys.modules.get(mod_name)
    if module is None:
        if str(file.parent) not in sys.path:  # its helpers (modules and folders beside it) import
            sys.path.append(str(file.parent))
        loader = importlib.util.spec_from_file_location(mod_name, file)
        if loader is None or loader.loader is None:
            raise PolicyError(f"--policy {spec}: {path} cannot be imported as Python")
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except SyntaxError as e:
            raise PolicyError(f"--policy {spec}: syntax error in {path}, line {e.lineno}: {e.msg}") from None
        except Exception as e:  # the user's module raised on import
            raise PolicyError(f"--policy {spec}: importing {path} raised {type(e).__name__}: {e}") from None
        sys.modules[mod_name] = module
    cls = getattr(module, cls_name, None)
    if cls is None:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and hasattr(v, "play")
                       and v.__module__ == mod_name)
        raise PolicyError(f"--policy {spec}: {path} has no {cls_name}"
                          + (f" (its policies: {', '.join(names)})" if names else ""))
    if not isinstance(cls, type) or not callable(getattr(cls, "play", None)):
        raise PolicyError(f"--policy {spec}: {cls_name} is not a policy class (subclass duck.policies.UserPolicy, "
                          "or give it play(session))")
    return cls


def _user_policy(spec: str, seed: int) -> Policy:
    cls = load_policy_file(spec)
    try:
        policy = cls(seed)
    except TypeError:
        policy = cls()  # a class that takes no seed
    if not getattr(policy, "name", ""):
        policy.name = f"{Path(spec.rpartition(':')[0]).stem}:{cls.__name__}"
    return policy


def make_policy(name: str, seed: int = 0, *, config: Config | None = None, model_url: str | list[str] | None = None,
                url_index: int | None = None, pass_: int = 0, health: "ModelHealth | None" = None,
                kernel_factory: Callable[[Session, KernelConfig], Kernel] | None = None, on_fallback: Callable[[str], None] | None = None,
                probe_on_failure: bool = False) -> Policy:
    """The policy `name` for one game (a name, or `FILE.py:ClassName`: load_policy_file).
    `config` (default: `load_config()`) configures the agent and names its fallback
    (`agent.fallback`, None for none); `model_url` overrides `model.urls`; `url_index` picks
    the endpoint a game starts on (paired A/B units share it); `pass_` seeds the model's
    sampling; `health` is the model-down flag (the notebook's monitor, or `duck play`'s);
    `on_fallback(message)` hears when the fallback takes over; `probe_on_failure`: no monitor
    watches the server (`duck play`): a game whose requests keep failing probes it and, when
    it does not answer, sets `health` (coming back) and parks; the parked games probe it until
    it answers or `agent.outage_wait_s` has passed (then the explorer takes them)."""
    if name == "random":
        return RandomPolicy(seed)
    if name not in POLICIES and ":" in name:
        return _user_policy(name, seed)
    cfg = config or load_config()
    if name == "explorer":
        return Explorer(seed, cfg.explorer)
    if name == "llm":
        from duck.agent.loop import AgentPolicy
        from duck.llm.client import join_urls
        from duck.llm.health import probe_model

        url = (join_urls(model_url) or cfg.model.urls or [None])[0]
        probe = (lambda: probe_model(url, 10.0, cfg.model)) if health is not None else None
        parking = Parking(health, probe, cfg.agent.outage_wait_s if probe_on_failure else None) \
            if health is not None else None

        def agent() -> "AgentPolicy":
            return AgentPolicy(seed, cfg, model_url=model_url, url_index=url_index, pass_=pass_,
                               kernel_factory=kernel_factory, outage=parking)

        if cfg.agent.fallback is None:
            return agent()
        return FallbackPolicy(agent, lambda: make_policy(cfg.agent.fallback, seed, config=cfg), health,
                              on_fallback=on_fallback)
    raise ValueError(f"unknown policy {name!r}: {', '.join(POLICIES)}")


class FallbackPolicy:
    """The model-driven policy while it works, the fallback (the explorer) from where the game
    stands, for good, as soon as it cannot: the health flag says the server is gone (at the
    start), or the model policy raises (ModelDown: its server cannot come back in time, or
    its requests fail while the server answers; or a bug)."""

    name = "llm"

    def __init__(self, llm: Callable[[], Policy], fallback: Callable[[], Policy],
                 health: "ModelHealth | None" = None, *, on_fallback: Callable[[str], None] | None = None) -> None:
        self.llm, self.fallback, self.health = llm, fallback, health
        self.on_fallback = on_fallback

    def play(self, session: Any) -> None:
        if self.health is None or not self.health.down() or self.health.coming_back():
            try:  # (a model game parks while the server is coming back: duck.agent.loop, Parking)
                self.llm().play(session)
                return
            except (GameError, PlayStopped):
                raise
            except Exception as e:  # a failing model or a bug must not idle the game
                self._say(session, f"the model policy failed ({type(e).__name__}: {e}): the explorer takes over",
                          traceback.format_exc(limit=6))
        else:
            self._say(session, "no model server: the explorer plays")
        if session.stop_reason() is None:
            self.fallback().play(session)

    def _say(self, session: Any, message: str, detail: Any = None) -> None:
        session.event("fallback", message, detail)
        if self.on_fallback is not None:
            self.on_fallback(message)



class Parking:
    """How a model game waits out an outage of its server (the agent calls `wait` when its
    requests keep failing, or before a request while the health flag is down).

    `health`: the run's flag. `probe`: a one-token chat to the server. `wait_s`: None when a
    monitor owns the flag (the notebook: it restarts the server, and sets the flag to gone
    when no restart can come in time); a number when nobody does (`duck play`): the parked
    games probe the server themselves and give up `wait_s` after the flag was set."""

    def __init__(self, health: "ModelHealth", probe: Callable[[], bool] | None = None,
                 wait_s: float | None = None, poll_s: float = 1.0) -> None:
        self.health, self.probe, self.wait_s = health, probe, wait_s
        self.poll_s = poll_s if wait_s is None else max(poll_s, 5.0)  # (probes are chats: not every second)

    def down(self) -> bool:
        return self.health.down()

    def wait(self, session: Session, why: str) -> bool:
        """Park until the server answers again: True then (the game holds a slot again, its
        kernel and context as they were); False when it cannot come back in time (the
        explorer's turn). Raises PlayStopped when the game must end meanwhile."""
        h = self.health
        if not h.down():  # this game's requests failed: is the server down, or only this game?
            if self.probe is None or self.probe():
                return False  # it answers: the failure is this game's
            h.mark_down(f"no answer to a probe after: {why}"[:500], quiet=True, coming_back=self.wait_s != 0)
        if not h.coming_back():
            return False
        session.event("parked", f"the model server is down ({why[:200]}): the game waits for it, no action played")
        t0 = time.monotonic()
        session.yield_slot("parked")
        while h.down():
            if not h.coming_back():
                session.event("parked", "the model server cannot come back in time: the explorer takes the game")
                session.yield_slot("back")  # (unparked: the explorer plays holding a slot, as any game)
                return False
            if reason := session.stop_reason():
                raise PlayStopped(reason)
            if self.wait_s is not None and self._probe_again():
                break
            time.sleep(self.poll_s)
        session.yield_slot("back")
        session.event("resumed", f"the model server answers again after {time.monotonic() - t0:.0f} s: "
                                 "the game resumes with the model")
        return True

    def _probe_again(self) -> bool:
        """No monitor: True when the probe answers (the flag cleared), else gives up (the
        flag set to gone) once the server has been down `wait_s`."""
        if self.probe is not None and self.probe():
            self.health.mark_up()
            return True
        if self.health.down_for_s() > self.wait_s:
            self.health.mark_down(f"no answer for {self.wait_s:.0f} s", quiet=True)
        return False
