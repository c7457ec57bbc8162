"""The host half of `action(...)`: read the names the model wrote, step the game through the
`Session` (which records every action), and answer in the Duck's result format.

The result dicts follow ../shared/duck-traces/README.md ("Sandbox API", `action(actions)`)
key for key, because recorded Duck code prints them and our replay compares that output.
The rules that matter for play:

* a batch stops after an action that completes a level, ends the game or wins it, at a
  later action the game does not allow now (`invalid_action`), and when time is up
  (`stopped`); after such a result further calls in the same snippet do nothing
  (`previous_<reason>`), so code cannot act blind on a board it has not looked at;
* the host owns the clock: `stopping` (time up) is applied here, between two actions, never
  by killing the worker mid-step;
* a call may carry a `Gate`, asked when an `action()` request arrives and before each action:
  it may end the snippet there or declare the run's time up. Our agent's calls have none; the
  replay of the Duck's traces enforces the recorded action counts with one
  (duck.lab.replay_caps).

Which names are accepted (ours add UNDO, CLICK and clicks written as the results display them,
`'MOUSE(row=20, col=20)'`) and what GAME_OVER allows is the kernel's dialect
(duck.sandbox.dialect). The guards against wasted actions (`ActionHost.guards`, installed by
the agent: duck.sandbox.batch_guards) are checked here between two actions; every executed
action's frames go into `CallActions.steps` (duck.game.change.Step) for the turn's facts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from duck.game.actions import CLICK_ID, RESET, RESET_ID, Action, ModelNames, display
from duck.game.change import Step
from duck.game.source import GameError
from duck.play.session import PlayStopped, Session
from duck.sandbox.batch_guards import Guards
from duck.sandbox.dialect import Dialect

TERMINAL_ERROR = "No action was executed because the current game state is terminal or stopping."
STOP_DETAIL = {
    "run_complete": "No further actions were executed because the run is already complete.",
    "game_over": "No further actions were executed because the previous action reached "
                 "GAME_OVER; the runner will auto-reset before the next analyzer turn.",
    "level_completed": "No further actions were executed because the previous action completed "
                       "a level; re-ground on the new scene before acting again.",
    "done": "No further actions were executed because the environment reported done.",
}


def parse(items: list[dict[str, Any]], names: ModelNames) -> tuple[list[Action], str | None]:
    """Model items -> Actions, or the Duck's error message (1-based index)."""
    out = []
    for i, item in enumerate(items, start=1):
        raw = item.get("action")
        if (cell := names.click_text(raw)) is not None:  # 'MOUSE(row=20, col=20)', as results show clicks
            out.append(Action.at(*cell))
            continue
        aid = names.id(raw)
        if aid is None:
            return [], f"Unknown action at index {i}: {raw!r}"
        if aid == CLICK_ID:
            try:
                out.append(Action.at(item["row"], item["col"]))
            except (KeyError, TypeError, ValueError, OverflowError):
                return [], f"MOUSE action at index {i} requires integer row and col arguments."
        else:
            out.append(Action(aid))
    return out, None


def terminal_reason(result: dict[str, Any]) -> str | None:
    for key in ("run_complete", "game_over", "level_completed", "done"):
        if result.get(key):
            return key
    return None


Verdict = Literal["go", "end", "stop"]
GateStage = Literal["request", "action"]


class Gate(Protocol):
    """A check the host makes for one call: when an `action()` request arrives ("request",
    before its names are read) and before each of its actions ("action"), given how many
    actions the call has executed so far. "go" carries on; "end" ends the snippet there (the
    worker raises StopSnippet: CallResult kind "stopped"); "stop" declares the run's time up
    (this action and every later one get the terminal result)."""

    def __call__(self, executed: int, stage: GateStage) -> Verdict: ...


@dataclass
class CallActions:
    """Per-snippet action state: the call's gate, what ran, and the terminal result if any."""

    gate: Gate | None = None
    executed: list[str] = field(default_factory=list)  # display strings
    terminal: dict[str, Any] | None = None
    steps: list[Step] = field(default_factory=list)  # every executed action with its frames
    ineffective: str | None = None  # the first action that changed nothing away from the HUD border

    def ask(self, stage: GateStage) -> Verdict:
        return "go" if self.gate is None else self.gate(len(self.executed), stage)


class ActionHost:
    """Executes action batches on one Session in the Duck's semantics."""

    def __init__(self, session: Session, dialect: Dialect, time_limit_s: float | None) -> None:
        self.session = session
        self.dialect = dialect
        self.time_limit_s = time_limit_s
        self.t0 = time.monotonic()
        self.stopping = False  # the run's time is up (a gate said so)
        self.guards: Guards | None = None  # duck.sandbox.batch_guards; installed by the agent

    @property
    def game(self):
        return self.session.game

    def level_number(self) -> int:
        obs = self.session.obs
        n = self.game.win_levels or 1
        return n if obs.state == "WIN" else max(1, min(n, obs.levels_completed + 1))

    def names(self) -> list[str]:
        return self.dialect.names.valid(self.session.obs.available_actions)

    def timers(self) -> dict[str, float | None]:
        elapsed = max(0.0, time.monotonic() - self.t0)
        left = None if self.time_limit_s is None else max(0.0, self.time_limit_s - elapsed)
        return {"run_elapsed_seconds": elapsed, "time_remaining_seconds": left}

    def should_stop(self) -> bool:
        return self.stopping or self.session.stop_reason() is not None

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
        (the call's gate said so; the result is then {} if nothing ran)."""
        if call.ask("request") == "end":
            return {}, [], True
        actions, error = parse(items, self.dialect.names)
        if error:
            return self.error_result(error), [], False
        if call.terminal is not None:
            return self.previous_result(call.terminal, len(actions)), [], False
        if self.guards and self.guards.blocks(call.ineffective, self.level_number()):
            return self.guard_result(self.guards.block_line(call.ineffective, self.level_number()),
                                     len(actions)), [], True
        state = self.session.obs.state
        refused = state == "WIN" or state == "GAME_OVER" and not (
            self.dialect.reset_after_game_over and actions[:1] == [RESET])
        done: list[tuple[str, Any, int, int]] = []
        changed = False
        reward = 0.0
        stop_reason = None
        guard: str | None = None
        end = False
        n_levels = max(1, self.game.win_levels)
        for i, action in enumerate(actions):
            if i and self.guards and self.guards.blocks(call.ineffective, self.level_number()):
                stop_reason, end = "guard_blocked", True
                guard = self.guards.block_line(call.ineffective, self.level_number())
                break
            verdict = call.ask("action")
            if verdict == "end":
                end = True
                break
            if verdict == "stop":
                self.stopping = True
            if i == 0 and (refused or self.should_stop()):
                return self.terminal_result(len(actions)), [], False
            if self.should_stop():
                stop_reason = "stopped"
                break
            before = self.session.obs
            if action.id != RESET_ID and action.id not in before.available_actions:
                if done:
                    stop_reason = "invalid_action"
                    break
                return self.error_result(f"{display(action)} is not valid right now."), [], False
            n_before = self.game.actions
            try:
                after = self.session.step(action, info)
            except PlayStopped:
                stop_reason = "stopped"
                break
            except GameError as e:
                if done:
                    stop_reason = "action_error"
                    break
                return self.error_result(f"{type(e).__name__}: {e}"), [], False
            if self.game.actions == n_before:  # refused (a RESET that would restart the game)
                if done:
                    stop_reason = "action_error"
                    break
                return self.error_result(f"{display(action)} was refused: this level has no "
                                         "actions yet, so it would restart the whole game."), [], False
            text = display(action)
            call.executed.append(text)
            call.steps.append(Step(text, before.grid, tuple(after.frames), after.state, after.levels_completed))
            done.append((text, after, self.game.actions, self.level_number()))
            changed = changed or not np.array_equal(before.grid, after.grid)
            reward += (after.levels_completed - before.levels_completed) / n_levels
            if after.state == "WIN":
                stop_reason = "run_complete"
                break
            if after.state == "GAME_OVER":
                stop_reason = "game_over"
                break
            if after.levels_completed > before.levels_completed:
                stop_reason = "level_completed"
                break
            if self.guards and self.guards.ineffective(before.grid, after.grid):
                call.ineffective = call.ineffective or f"{text}, action {len(call.executed)} of this call"
                if self.guards.stop_on_no_effect and i < len(actions) - 1:
                    stop_reason = "no_effect"
                    guard = self.guards.stop_line(text, len(call.executed), len(actions) - 1 - i)
                    break
        if not done:
            if end:
                return {}, [], True
            return (self.terminal_result(len(actions)) if stop_reason == "stopped"
                    else self.error_result("No action was executed.")), [], False
        last = self.session.obs
        win = last.state == "WIN"
        result: dict[str, Any] = {
            "executed": True, "action_num": self.game.actions, "level": self.level_number(),
            "score": last.levels_completed, "reward": reward, "state": last.state,
            "valid_actions": self.names(), "board_changed": changed, "done": win,
            "level_completed": stop_reason == "level_completed", "game_over": last.state == "GAME_OVER",
            "run_complete": win, "action_display": done[-1][0],
            "executed_actions": [d[0] for d in done]}
        if len(actions) > 1 or len(done) < len(actions):
            result |= {"requested_count": len(actions), "executed_count": len(done),
                       "stopped_early": len(done) < len(actions)}
        if stop_reason:
            result["stop_reason"] = stop_reason
        if guard:
            result["guard"] = guard
        result |= self.timers()
        if terminal_reason(result):
            call.terminal = result
        return result, done, end
