"""`explore(n)`, host side: the kernel hands up to n real actions to an explorer.

The model's code asks (the world-model tools' `explore`, duck.sandbox.tools); the host owns the
game, so the host plays: it gives the explorer callable it was built with
(`Kernel(..., explore=fn)`, `fn(session)` plays until stopped; the composition root,
duck.policies, passes the non-LLM explorer — the sandbox never imports it) a `Handoff`, a view
of the session whose `step` records each action like any other (the game's record through the
real `Session.step`, the kernel's own history for the worker), and that ends the explorer
(`PlayStopped`) after n actions, a level change, GAME_OVER or WIN, or when the run must stop. The answer has the shape of an `action()` result (executed actions,
state, level, what stopped it), so the turn ends and is described as after any action.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import numpy as np

from duck.game.actions import Action, display
from duck.play.session import PlayStopped
from duck.sandbox.actions import ending

Explore = Callable[[Any], None]  # plays on the session it is given until PlayStopped
MAX_ACTIONS = 100


class Handoff:
    """The session as the explorer sees it during one explore(n) (module docstring)."""

    def __init__(self, kernel: Any, call: Any, info: dict[str, Any] | None, n: int) -> None:
        self.kernel, self.call, self.n = kernel, call, n
        self.session = kernel.session
        self.info = {**(info or {}), "explore": True}
        self.done: list[str] = []
        self.changed = False
        self.reason: str | None = None
        self.levels0 = self.session.obs.levels_completed

    def __getattr__(self, name: str) -> Any:  # obs, game, event, deadline, ... as the session has them
        return getattr(self.session, name)

    def stop_reason(self) -> str | None:
        return self.reason or self.session.stop_reason()

    def step(self, action: Action, info: dict[str, Any] | None = None) -> Any:
        if self.reason is None and len(self.done) >= self.n:
            self.reason = "explored"
        if self.reason is None and self.kernel.host.should_stop():
            self.reason = "stopped"
        if self.reason is not None:
            raise PlayStopped(self.reason)
        before = self.session.obs
        count = self.session.game.actions
        try:
            obs = self.session.step(action, {**self.info, **(info or {})})
        except PlayStopped:
            self.reason = "stopped"
            raise
        if self.session.game.actions > count:
            text = display(action)
            self.done.append(text)
            self.call.executed.append(text)
            self.kernel.append(text, obs)
            self.changed = self.changed or not np.array_equal(before.grid, obs.grid)
            self.reason = ending(before, obs)
        return obs


def run(kernel: Any, msg: dict[str, Any], call: Any, info: dict[str, Any] | None) -> dict[str, Any]:
    """Answer one explore request: the result dict (in the shape of an action() result)."""
    host = kernel.host
    try:
        n = int(msg.get("n", 10))
    except (TypeError, ValueError, OverflowError):  # the worker's message may be forged
        n = 0
    if kernel.explore is None:
        return host.error_result("explore() is not available in this game (the kernel has no explorer).")
    if not 1 <= n <= MAX_ACTIONS:
        return host.error_result(f"explore(n) takes 1 to {MAX_ACTIONS} actions.")
    if call.terminal is not None:
        return host.previous_result(call.terminal, n)
    if kernel.session.obs.state in ("WIN", "GAME_OVER") or host.should_stop():
        return host.terminal_result(n)
    h = Handoff(kernel, call, info, n)
    try:
        kernel.explore(h)
    except PlayStopped:
        pass
    except Exception as e:  # noqa: BLE001 - an explorer bug must not end the model's call
        kernel.session.event("error", f"explore failed: {type(e).__name__}: {e}", traceback.format_exc(limit=6))
        h.reason = h.reason or "explorer_error"
    obs = kernel.session.obs
    if not h.done:
        res = host.error_result("explore() played no action" + (f" ({h.reason})" if h.reason else "") + ".")
        return res | {"stop_reason": h.reason or "explorer_done"}
    win = obs.state == "WIN"
    result = {"executed": True, "explored": True, "action_num": kernel.session.game.actions,
              "level": host.level_number(), "score": obs.levels_completed, "state": obs.state,
              "valid_actions": host.names(), "board_changed": h.changed, "done": win,
              "level_completed": obs.levels_completed > h.levels0 and not win, "game_over": obs.state == "GAME_OVER",
              "run_complete": win, "action_display": h.done[-1], "executed_actions": list(h.done),
              "requested_count": n, "executed_count": len(h.done), "stopped_early": len(h.done) < n,
              "stop_reason": h.reason or "explorer_done"} | host.timers()
    kernel.state.last_result = result
    kernel.state.valid = host.names()
    if result["run_complete"] or result["game_over"] or result["level_completed"]:
        call.terminal = result  # later action() calls of this snippet do nothing, as after a batch
    return result
