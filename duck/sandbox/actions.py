"""The host half of `action(...)`: parse the names the model wrote, step the game through
the `Session` (which records every action), and answer in the Duck's result format.

The result dicts follow ../shared/duck-traces/README.md ("Sandbox API", `action(actions)`)
key for key, because recorded Duck code prints them and our replay compares that output.
The rules that matter for play:

* a batch stops after an action that completes a level, ends the game or wins it, at a
  later action the game does not allow now (`invalid_action`), and when time is up
  (`stopped`); after such a result further calls in the same snippet do nothing
  (`previous_<reason>`), so code cannot act blind on a board it has not looked at;
* the host owns the clock: `stopping` (time up) and the replay's action cap are applied
  here, between two actions, never by killing the worker mid-step.

Our own names on top of the Duck's: UNDO (= ACTION7), CLICK (= MOUSE) and RESET.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duck.game.actions import Action
from duck.game.source import GameError
from duck.play.session import PlayStopped, Session

DUCK_NAMES = {1: "UP", 2: "DOWN", 3: "LEFT", 4: "RIGHT", 5: "SPACE", 6: "MOUSE", 7: "ACTION7"}
OUR_NAMES = DUCK_NAMES | {7: "UNDO"}
_DUCK_IDS = {"UP": 1, "DOWN": 2, "LEFT": 3, "RIGHT": 4, "SPACE": 5, "MOUSE": 6, "RESET": 0} | {
    f"ACTION{i}": i for i in range(1, 7)}
_OUR_IDS = _DUCK_IDS | {"ACTION7": 7, "UNDO": 7, "CLICK": 6}
TERMINAL_ERROR = "No action was executed because the current game state is terminal or stopping."
STOP_DETAIL = {
    "run_complete": "No further actions were executed because the run is already complete.",
    "game_over": "No further actions were executed because the previous action reached "
                 "GAME_OVER; the runner will auto-reset before the next analyzer turn.",
    "level_completed": "No further actions were executed because the previous action completed "
                       "a level; re-ground on the new scene before acting again.",
    "done": "No further actions were executed because the environment reported done.",
}


def display(action: Action) -> str:
    if action.id == 6:
        return f"MOUSE(row={action.y}, col={action.x})"
    return "RESET" if action.id == 0 else OUR_NAMES[action.id]


def valid_names(available: list[int], compat: bool) -> list[str]:
    names = DUCK_NAMES if compat else OUR_NAMES
    return [names[i] for i in available if i in names]


def parse(items: list[dict[str, Any]], compat: bool) -> tuple[list[Action], str | None]:
    """Model items -> Actions, or the Duck's error message (1-based index)."""
    ids = _DUCK_IDS if compat else _OUR_IDS
    out = []
    for i, item in enumerate(items, start=1):
        raw = item.get("action")
        aid = ids.get(str(raw or "").strip().upper())
        if aid is None:
            return [], f"Unknown action at index {i}: {raw!r}"
        if aid == 6:
            try:
                row = max(0, min(63, int(item["row"])))
                col = max(0, min(63, int(item["col"])))
            except (KeyError, TypeError, ValueError):
                return [], f"MOUSE action at index {i} requires integer row and col arguments."
            out.append(Action(6, col, row))
        else:
            out.append(Action(aid))
    return out, None


def terminal_reason(result: dict[str, Any]) -> str | None:
    for key in ("run_complete", "game_over", "level_completed", "done"):
        if result.get(key):
            return key
    return None


@dataclass
class CallActions:
    """Per-snippet action state: what ran, the cap, and the terminal result if any."""

    cap: int | None = None  # replay: the recorded number of actions of this call
    # Once the cap is reached: "kill" ends the snippet at its next action() whatever it
    # asks (the Duck killed it at 30 s); "cap" ends it at the next action() that would
    # execute something; "stop" means the run's time is up (terminal results from then on).
    on_cap: str = "cap"
    executed: list[str] = field(default_factory=list)
    terminal: dict[str, Any] | None = None


class ActionHost:
    """Executes action batches on one Session in the Duck's semantics."""

    def __init__(self, session: Session, *, compat: bool, time_limit_s: float | None,
                 t0: float | None = None) -> None:
        self.session = session
        self.compat = compat
        self.time_limit_s = time_limit_s
        self.t0 = time.monotonic() if t0 is None else t0
        self.stopping = False  # the run's time is up (set by the replay or the deadline)

    @property
    def game(self):
        return self.session.game

    def level_number(self) -> int:
        obs = self.session.obs
        n = self.game.win_levels or 1
        return n if obs.state == "WIN" else max(1, min(n, obs.levels_completed + 1))

    def names(self) -> list[str]:
        return valid_names(self.session.obs.available_actions, self.compat)

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

    def run_batch(self, items: list[dict[str, Any]], call: CallActions,
                  info: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[tuple[str, Any, int, int]], bool]:
        """Execute one `action(...)` request. Returns (result, [(display, observation, step,
        level)] of the executed actions, stop) where stop asks the worker to end the snippet
        (the replay's cap)."""
        capped = call.cap is not None and len(call.executed) >= call.cap
        if capped and call.on_cap == "kill":
            return {}, [], True
        actions, error = parse(items, self.compat)
        if error:
            return self.error_result(error), [], False
        if call.terminal is not None:
            return self.previous_result(call.terminal, len(actions)), [], False
        obs = self.session.obs
        if capped:
            if call.on_cap != "stop":
                return {}, [], True
            self.stopping = True
        over = obs.state == "GAME_OVER" and (self.compat or actions[0].id != 0)
        if self.should_stop() or over or obs.state == "WIN":
            return self.terminal_result(len(actions)), [], False
        done: list[tuple[str, Any]] = []
        changed = False
        reward = 0.0
        stop_reason = None
        stop = False
        n_levels = max(1, self.game.win_levels)
        for i, action in enumerate(actions):
            if call.cap is not None and len(call.executed) >= call.cap:
                if call.on_cap != "stop":
                    stop = True
                    break
                self.stopping = True
            if self.should_stop():
                stop_reason = "stopped"
                break
            before = self.session.obs
            if action.id != 0 and action.id not in before.available_actions:
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
        if not done:
            if stop:
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
        result |= self.timers()
        if terminal_reason(result):
            call.terminal = result
        return result, done, stop
