"""The host half of `action(...)`: read the names the model wrote, step the game through the
`Session` (which records every action), and answer in the Duck's result format, key for key
(../shared/duck-traces/README.md, "Sandbox API": recorded Duck code prints them).

A batch stops after an action that completes a level, ends the game or wins it, at a later
action the game does not allow now (`invalid_action`), and when play must stop (`stopped`: the
session's budget, deadline or stop, or the call's own limit, `CallActions.deadline`, checked
between two actions); after such a result further calls of the snippet play nothing
(`previous_<reason>`): code cannot act blind on a board it has not looked at. After GAME_OVER
only RESET plays. Names are duck.game.actions' (`MODEL_NAMES`); the guards against wasted actions
(duck.sandbox.batch_guards) are checked between two actions; every executed action's frames go
into `CallActions.steps` for the turn's facts. `duck replay` caps its calls in a subclass.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duck.game.actions import CLICK_ID, MAX_NAME, MODEL_NAMES, RESET, RESET_ID, Action, display
from duck.game.change import Step
from duck.game.source import GameError, Observation
from duck.play.session import PlayStopped, Session
from duck.sandbox.batch_guards import Guards

RESULTS = 200  # action results a call's tool message is rendered from, at most
TERMINAL_ERROR = "No action was executed because the current game state is terminal or stopping."
STOP_DETAIL = {
    "run_complete": "No further actions were executed because the run is already complete.",
    "game_over": "No further actions were executed because the previous action reached "
                 "GAME_OVER; the runner will auto-reset before the next analyzer turn.",
    "level_completed": "No further actions were executed because the previous action completed "
                       "a level; re-ground on the new scene before acting again.",
    "done": "No further actions were executed because the environment reported done.",
}


def parse(items: list[dict[str, Any]]) -> tuple[list[Action], str | None]:
    """Model items -> Actions, or the Duck's error message (1-based index)."""
    out = []
    for i, item in enumerate(items, start=1):
        raw = item.get("action")
        if (cell := MODEL_NAMES.click_text(raw)) is not None:  # 'MOUSE(row=20, col=20)', as results show clicks
            out.append(Action.at(*cell))
            continue
        aid = MODEL_NAMES.id(raw)
        if aid is None:
            return [], f"Unknown action at index {i}: {_shown(raw)}"
        if aid == CLICK_ID:
            try:
                out.append(Action.at(item["row"], item["col"]))
            except (KeyError, TypeError, ValueError, OverflowError):
                return [], f"MOUSE action at index {i} requires integer row and col arguments."
        else:
            out.append(Action(aid))
    return out, None


def _shown(raw: Any) -> str:
    """repr() of a name model code sent, cut to MAX_NAME characters (an error reply stays small)."""
    text = str(raw)
    return repr(raw) if len(text) <= MAX_NAME else repr(text[:MAX_NAME]) + "..."


def terminal_reason(result: dict[str, Any]) -> str | None:
    for key in ("run_complete", "game_over", "level_completed", "done"):
        if result.get(key):
            return key
    return None


@dataclass
class CallActions:
    """Per-snippet action state: what ran, and the terminal result if any."""

    executed: list[str] = field(default_factory=list)  # display strings
    terminal: dict[str, Any] | None = None
    steps: list[Step] = field(default_factory=list)  # every executed action with its frames
    ineffective: str | None = None  # the first action that changed nothing away from the HUD border
    # The results the host answered with (the last RESULTS of them): the tool message's action
    # and guard lines come from here, never from what the worker sends back (issue 37).
    results: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RESULTS))
    deadline: float | None = None  # the call's limit (time.monotonic()): a batch stops between actions there

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


class ActionHost:
    """Executes action batches on one Session in the Duck's semantics."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.t0 = time.monotonic()
        self.guards: Guards | None = None  # duck.sandbox.batch_guards; installed by the agent

    @property
    def game(self):
        return self.session.game

    def level_number(self) -> int:
        obs = self.session.obs
        n = self.game.win_levels or 1
        return n if obs.state == "WIN" else max(1, min(n, obs.levels_completed + 1))

    def names(self) -> list[str]:
        return MODEL_NAMES.valid(self.session.obs.available_actions)

    def timers(self) -> dict[str, float | None]:
        """The Duck's timer fields of a result (it had a run time limit; our games have none here)."""
        return {"run_elapsed_seconds": max(0.0, time.monotonic() - self.t0), "time_remaining_seconds": None}

    def should_stop(self) -> bool:
        """Whether play must stop before the next action (the session's budget, deadline or stop)."""
        return self.session.stop_reason() is not None

    def error_result(self, message: str) -> dict[str, Any]:
        return {"executed": False, "action_num": None, "level": None, "score": None, "reward": None,
                "state": None, "valid_actions": self.names(), "board_changed": False, "done": False,
                "level_completed": False, "game_over": False, "run_complete": False,
                "action_display": None, **self.timers(), "error": message}

    def terminal_result(self, n_requested: int) -> dict[str, Any]:
        state = self.session.obs.state
        win, over = state == "WIN", state == "GAME_OVER"
        out = {"executed": False, "action_num": self.game.actions, "level": self.level_number(),
               "score": self.session.obs.levels_completed, "reward": None, "state": state,
               "valid_actions": [], "board_changed": False, "done": win, "level_completed": False,
               "game_over": over, "run_complete": win, "action_display": None}
        out |= {"requested_count": n_requested, "executed_count": 0, "stopped_early": True,
                "stop_reason": "run_complete" if win else "game_over" if over else "stopped"}
        return out | self.timers() | {"error": TERMINAL_ERROR}

    def guard_result(self, line: str, n_requested: int) -> dict[str, Any]:
        """A request a guard refused (duck.sandbox.batch_guards): nothing was played."""
        out = self.error_result("No action was executed.") | {"requested_count": n_requested, "executed_count": 0,
                                                               "stopped_early": True, "stop_reason": "guard_blocked"}
        return out | {"guard": line}

    def previous_result(self, prev: dict[str, Any], n_requested: int) -> dict[str, Any]:
        reason = terminal_reason(prev) or "terminal_state"
        return {"executed": False, "action_num": prev.get("action_num"), "level": prev.get("level"),
                "score": prev.get("score"), "reward": 0.0, "state": prev.get("state"),
                "valid_actions": [], "board_changed": False, "done": bool(prev.get("done")),
                "level_completed": bool(prev.get("level_completed")),
                "game_over": bool(prev.get("game_over")), "run_complete": bool(prev.get("run_complete")),
                "requested_count": n_requested, "executed_count": 0, "stopped_early": True,
                "stop_reason": f"previous_{reason}",
                "stop_detail": STOP_DETAIL.get(reason, "No further actions were executed because "
                                               "the previous action reached a terminal state.")}

    def run_batch(self, items: list[dict[str, Any]], call: CallActions, info: dict[str, Any] | None = None,
                  ) -> tuple[dict[str, Any], list[tuple[str, Any, int, int]], bool]:
        """Execute one `action(...)` request. Returns (result, [(display, observation, step,
        level)] of the executed actions, end) where `end` asks the worker to end the snippet
        (a guard refused a further action of the call)."""
        actions, error = parse(items)
        if error:
            return self.error_result(error), [], False
        if call.terminal is not None:
            return self.previous_result(call.terminal, len(actions)), [], False
        if self.guards and self.guards.blocks(call.ineffective, self.level_number()):
            return self.guard_result(self.guards.block_line(call.ineffective, self.level_number()),
                                     len(actions)), [], True
        state = self.session.obs.state
        if self.should_stop() or state == "WIN" or state == "GAME_OVER" and actions[:1] != [RESET]:
            return self.terminal_result(len(actions)), [], False
        batch = Batch(actions)
        for i, action in enumerate(actions):
            if i and self.guards and self.guards.blocks(call.ineffective, self.level_number()):
                batch.stop("guard_blocked", self.guards.block_line(call.ineffective, self.level_number()), end=True)
                break
            if i and (self.should_stop() or call.out_of_time()):  # issue 48: the clock, per action
                batch.stop("stopped")
                break
            refused = self._play(action, i, batch, call, info)
            if refused is not None:
                return self.error_result(refused), [], False
            if batch.stop_reason is not None:
                break
        if not batch.done:
            return (self.terminal_result(len(actions)) if batch.stop_reason == "stopped"
                    else self.error_result("No action was executed.")), [], False
        result = self._result(batch)
        if terminal_reason(result):
            call.terminal = result
        return result, batch.done, batch.end

    def _play(self, action: Action, i: int, batch: "Batch", call: CallActions,
              info: dict[str, Any] | None) -> str | None:
        """Play one action of a batch. Returns the error when the batch's first action is
        refused (nothing was played); a later refusal, or what the action did that ends the
        batch, is the batch's stop reason."""
        before = self.session.obs
        if action.id != RESET_ID and action.id not in before.available_actions:
            return batch.refuse("invalid_action", f"{display(action)} is not valid right now.")
        n_before = self.game.actions
        try:
            after = self.session.step(action, info)
        except PlayStopped:
            batch.stop("stopped")
            return None
        except GameError as e:
            return batch.refuse("action_error", f"{type(e).__name__}: {e}")
        if self.game.actions == n_before:  # refused (a RESET that would restart the game)
            return batch.refuse("action_error", f"{display(action)} was refused: this level has no actions yet, "
                                "so it would restart the whole game.")
        text = display(action)
        call.executed.append(text)
        call.steps.append(Step(text, before.grid, tuple(after.frames), after.state, after.levels_completed))
        batch.played(text, before, after, self.game.actions, self.level_number(), max(1, self.game.win_levels))
        if batch.stop_reason is None and self.guards and self.guards.ineffective(before.grid, after.grid):
            call.ineffective = call.ineffective or f"{text}, action {len(call.executed)} of this call"
            if self.guards.stop_on_no_effect and i < len(batch.actions) - 1:
                batch.stop("no_effect", self.guards.stop_line(text, len(call.executed), len(batch.actions) - 1 - i))
        return None

    def _result(self, batch: "Batch") -> dict[str, Any]:
        """The result of a batch that played at least one action."""
        last = self.session.obs
        win = last.state == "WIN"
        result: dict[str, Any] = {
            "executed": True, "action_num": self.game.actions, "level": self.level_number(),
            "score": last.levels_completed, "reward": batch.reward, "state": last.state,
            "valid_actions": self.names(), "board_changed": batch.changed, "done": win,
            "level_completed": batch.stop_reason == "level_completed", "game_over": last.state == "GAME_OVER",
            "run_complete": win, "action_display": batch.done[-1][0],
            "executed_actions": [d[0] for d in batch.done]}
        n = len(batch.actions)
        if n > 1 or len(batch.done) < n:
            result |= {"requested_count": n, "executed_count": len(batch.done), "stopped_early": len(batch.done) < n}
        if batch.stop_reason:
            result["stop_reason"] = batch.stop_reason
        if batch.guard:
            result["guard"] = batch.guard
        return result | self.timers()


@dataclass
class Batch:
    """One `action(...)` request being played: what ran, and why it stopped."""

    actions: list[Action]
    done: list[tuple[str, Observation, int, int]] = field(default_factory=list)
    changed: bool = False
    reward: float = 0.0
    stop_reason: str | None = None
    guard: str | None = None  # the guard's line, when a guard stopped it
    end: bool = False  # end the snippet (a guard refused a further action)

    def stop(self, reason: str, guard: str | None = None, *, end: bool = False) -> None:
        self.stop_reason, self.guard, self.end = reason, guard, end

    def refuse(self, reason: str, error: str) -> str | None:
        """An action the game would not play: the batch's stop after an action played, else
        the error of the whole request."""
        if self.done:
            self.stop(reason)
            return None
        return error

    def played(self, text: str, before: Observation, after: Observation, step: int, level: int,
               n_levels: int) -> None:
        self.done.append((text, after, step, level))
        self.changed = self.changed or not np.array_equal(before.grid, after.grid)
        self.reward += (after.levels_completed - before.levels_completed) / n_levels
        if reason := ending(before, after):
            self.stop(reason)


def ending(before: Observation, after: Observation) -> str | None:
    """Why play stops after an action that led from `before` to `after` (a win, GAME_OVER, a
    level change), or None."""
    if after.state == "WIN":
        return "run_complete"
    if after.state == "GAME_OVER":
        return "game_over"
    return "level_completed" if after.levels_completed != before.levels_completed else None
