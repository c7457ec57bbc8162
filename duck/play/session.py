"""Playing one game with any policy: the budget, the stop signals and the record.

Every policy plays through a `Session`, never through the environment directly. `Session.step`
checks the action budget, the stop event and the deadline *before* sending an action, records
the action *before* returning, and reports progress to the scheduler. A policy is any object
with `name` and `play(session)`; the session raises `PlayStopped` to end it between two
actions. A game on a slot-limited model server holds a slot while it plays; the policy tells
the session where it may give it up (`yield_slot`: a trim, a level change, a model request).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from duck.game.actions import Action
from duck.game.source import Game, GameError, GameSource, Observation
from duck.play.conversation import NULL, ConversationWriter, conversation_path
from duck.play.record import RecordWriter, read_record
from duck.play.scoring import score_record
from duck.seeds import stable_hash

log = logging.getLogger(__name__)


def game_seed(seed: int, game_id: str, pass_: int = 0) -> int:
    """A seed per (run seed, game, pass) that is stable across processes and Pythons."""
    return stable_hash(seed, game_id, pass_)


class PlayStopped(Exception):
    """Raised by `Session.step` when the game must end; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Progress:
    game_id: str
    levels: int
    actions: int
    elapsed: float
    state: str
    tokens: int = 0  # generated tokens of the model's requests so far
    total_levels: int | None = None  # the game's levels, when it says


@dataclass
class GameResult:
    game_id: str
    levels: int
    actions: int
    score: float
    end_reason: str
    state: str = ""
    error: str | None = None


class Policy(Protocol):
    name: str

    def play(self, session: "Session") -> None: ...


class Session:
    """One game being played under a budget, with everything recorded."""

    def __init__(self, game: Game, writer: RecordWriter, *, max_actions: int,
                 stop: threading.Event | None = None, deadline: float | None = None,
                 on_progress: Callable[[Progress], None] | None = None,
                 conversation: ConversationWriter | None = None,
                 gate: Callable[[str | None], None] | None = None) -> None:
        self.game = game
        # Where a model-driven policy writes its conversation (duck.play.conversation); the
        # null writer when none is kept.
        self.conversation = conversation or NULL
        self.writer = writer
        self.max_actions = max_actions
        self.stop = stop
        self.deadline = deadline
        self.on_progress = on_progress
        # The scheduler's slot gate (scheduler.runner.SlotGate), None when no runner gates
        # this game: `gate(reason)` returns once the game holds a slot again.
        self.gate = gate
        self.tokens = 0  # generated tokens, from the `model` events
        # A policy that acts from its own thread (random, the explorer: `yields_in_step`) has
        # its yield points in `step`, before an action and after a level; the agent acts from
        # inside a kernel call, where a wait would run into the call's time-out, and calls
        # `yield_slot` itself between requests.
        self.yields_in_step = False
        self.t0 = time.monotonic()

    @property
    def obs(self) -> Observation:
        assert self.game.obs is not None
        return self.game.obs

    def stop_reason(self) -> str | None:
        """Why play must end now, or None. Policies may poll it between long thoughts."""
        if self.obs.state == "WIN":
            return "won"
        if self.game.actions >= self.max_actions:
            return "max_actions"
        if self.stop is not None and self.stop.is_set():
            return "stopped"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        return None

    def step(self, action: Action, info: dict[str, Any] | None = None) -> Observation:
        if self.yields_in_step:
            self.yield_slot(None)
        reason = self.stop_reason()
        if reason:
            raise PlayStopped(reason)
        if self.game.would_restart_game(action):
            # Never restart the whole game: offline it wipes the levels, in competition it
            # is a wasted action. Refuse it visibly and leave the board as it is.
            self.writer.event("refused", f"{action} on a level with no actions would restart the game")
            return self.obs
        before, levels = self.game.actions, self.game.levels
        obs = self.game.step(action)
        if self.game.actions > before:
            self.writer.action(self.game.actions, action, obs, info)
            self._report()
        if self.yields_in_step and obs.levels_completed > levels and obs.state != "WIN":
            self.yield_slot("level")
        return obs

    def yield_slot(self, reason: str | None = None) -> None:
        """A point where the game may give up its model-server slot: `reason` "trim" (its
        context was just trimmed, so its cached prefix is gone anyway) or "level" (it
        completed a level) always offers the slot back, and the scheduler may give it to a
        better-placed game; None (before a model request) yields only if the scheduler asked
        this game to (a preemption). Returns when the game holds a slot again, at once when
        nothing waits or no runner gates it (a no-op then); raises PlayStopped if the game
        must end meanwhile. Call it only where no kernel call or model request is in flight."""
        if self.gate is None:
            return
        self.gate(reason)
        if reason := self.stop_reason():
            raise PlayStopped(reason)

    def event(self, kind: str, message: str, data: Any = None) -> None:
        self.writer.event(kind, message, data)
        if kind == "model" and isinstance(data, dict) and data.get("completion_tokens"):
            # The scheduler counts a game's progress in generated tokens (scheduler.policy).
            self.tokens += int(data["completion_tokens"])
            self._report()

    def _report(self) -> None:
        if self.on_progress:
            self.on_progress(Progress(self.game.game_id, self.obs.levels_completed, self.game.actions,
                                      time.monotonic() - self.t0, self.obs.state, self.tokens,
                                      self.game.win_levels or None))


def recorded_session(source: GameSource, game_id: str, path: Path, max_actions: int = 10**9, *,
                     policy: str = "bench", seed: int | None = 0, **header: Any) -> Session:
    """A session on a new game of `source`, recorded at `path`, with no policy around it (the
    benchmarks and `duck replay` drive its kernel themselves; play_game writes the same header)."""
    game = source.make(game_id)
    writer = RecordWriter(path)
    writer.header(game_id=game_id, title=game.title, baselines=game.baselines, obs=game.obs, policy=policy,
                  seed=seed, **header)
    return Session(game, writer, max_actions=max_actions)


def play_game(source: GameSource, game_id: str, policy: Policy, *, max_actions: int,
              record_path: str | Path, stop: threading.Event | None = None,
              deadline: float | None = None, on_progress: Callable[[Progress], None] | None = None,
              seed: int | None = None, config: dict[str, Any] | None = None,
              pass_: int = 0, conversation: bool = True,
              gate: Callable[[str | None], None] | None = None) -> GameResult:
    """Play one game to its end, its budget, its deadline or a stop signal.

    With `conversation`, a policy that talks to a model writes its conversation beside the
    record (duck.play.conversation.conversation_path; gzipped at the end). `gate`: the
    scheduler's slot gate (Session.yield_slot), None when the game holds no server slot.
    Never raises for a game's or a policy's failure: the error goes into the record and
    the result, so one broken game cannot stop the others."""
    writer = RecordWriter(Path(record_path))
    try:
        game = source.make(game_id)
    except Exception as e:  # GameError, or anything a broken game file throws
        writer.header(game_id=game_id, title=game_id, baselines=None, obs=None, policy=policy.name,
                      seed=seed, config=config, pass_=pass_)
        writer.event("error", f"{type(e).__name__}: {e}")
        writer.end("error", 0, 0, "ERROR")
        return GameResult(game_id, 0, 0, 0.0, "error", "ERROR", str(e))
    writer.header(game_id=game_id, title=game.title, baselines=game.baselines, obs=game.obs,
                  policy=policy.name, seed=seed, config=config, pass_=pass_)
    conv = _conversation(record_path, game, policy, seed, pass_) if conversation else None
    session = Session(game, writer, max_actions=max_actions, stop=stop, deadline=deadline,
                      on_progress=on_progress, conversation=conv, gate=gate)
    session.yields_in_step = bool(getattr(policy, "yields_in_step", False))
    reason, error = "policy_done", None
    try:
        policy.play(session)
        reason = session.stop_reason() or "policy_done"
    except PlayStopped as s:
        reason = s.reason
    except GameError as e:
        reason, error = "error", str(e)
        writer.event("error", f"GameError: {e}")
    except Exception as e:  # a policy bug must not take the other games down
        reason, error = "error", f"{type(e).__name__}: {e}"
        writer.event("error", error, traceback.format_exc(limit=8))
    if not source.competition:
        _record_toolkit_score(source, game_id, writer)
    writer.end(reason, game.levels, game.actions, game.obs.state)
    if conv is not None:
        conv.close(reason)
    s = score_record(read_record(record_path))  # the score from the record, the run's truth
    return GameResult(game_id, game.levels, game.actions, s.score, reason, game.obs.state, error)


def _conversation(record_path: str | Path, game: Game, policy: Policy, seed: int | None,
                  pass_: int) -> ConversationWriter:
    """A new conversation for this game (a stale one from an earlier run is removed)."""
    path = conversation_path(record_path)
    for old in (path, path.with_name(path.name + ".gz")):
        old.unlink(missing_ok=True)
    return ConversationWriter(path, board=lambda: (game.actions, game.obs.grid),
                              start={"game_id": game.game_id, "pass": pass_, "seed": seed,
                                     "policy": policy.name, "record": Path(record_path).name})


def _record_toolkit_score(source: GameSource, game_id: str, writer: RecordWriter) -> None:
    """Keep the toolkit's own view of this game in the record, to check our scoring."""
    try:
        card = source.scorecard()
        env = next((e for e in (card.environments if card else []) if e.id == game_id), None)
        if env is not None:
            writer.event("scorecard", "arc_agi scorecard entry",
                         {"score": env.score, "levels_completed": env.levels_completed,
                          "actions": env.actions})
    except Exception as e:  # informative only
        log.warning("could not read the toolkit scorecard for %s: %s", game_id, e)
