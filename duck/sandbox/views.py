"""The game as model code sees it in the worker: the frame, history and transition views, and
the checks of `action()`'s argument.

The class names and messages are the Duck's (DESIGN §3: its recorded code runs unchanged and
prints what it printed then); ours adds `.frames` on a transition (every frame of its action).
"""

from __future__ import annotations

from typing import Any

from duck.game.actions import MAX_NAME
from duck.game.frames import Frame


class FrameView(Frame):
    """The Duck's frame class name shows in error messages; keep it."""


class HistoryEntryView:
    def __init__(self, action: str, frame: FrameView) -> None:
        self.action = action
        self.frame = frame

    def __str__(self) -> str:
        return f"AsciiHistoryEntryView(action={self.action!r}, frame={self.frame})"

    __repr__ = __str__


class TransitionView:
    def __init__(self, action: str, before_frame: FrameView | None, after_frame: FrameView) -> None:
        self.action = action
        self.before_frame = before_frame
        self.after_frame = after_frame
        self.frame = after_frame
        self.frames = [after_frame]  # every frame the action returned (its animation)
        self.result: dict[str, Any] = {}

    def __str__(self) -> str:
        return (f"ActionTransitionView(action={self.action!r}, before_frame={self.before_frame}, "
                f"after_frame={self.after_frame})")

    __repr__ = __str__


def _name(text: str, i: int) -> str:
    """An action name (or a row/col written as text) no longer than the host accepts
    (MAX_NAME: the host refuses a longer one as a protocol violation, issue 37)."""
    if len(text) > MAX_NAME:
        raise ValueError(f"Unknown action at index {i}: a name of {len(text)} characters "
                         f"(action names are at most {MAX_NAME}).")
    return text


def normalize_actions(actions: Any) -> list[dict[str, Any]]:
    """`action()`'s argument as a list of {"action", "row", "col"} items: the Duck's
    client-side checks, with its exact messages."""
    if isinstance(actions, (str, dict)):
        items = [actions]
    elif isinstance(actions, (list, tuple)):
        items = list(actions)
    else:
        raise TypeError("action(actions) expects a string, an action object, or a list of "
                        "action strings/objects.")
    if not items:
        raise ValueError("action(actions) requires at least one action.")
    out = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, str):
            name = _name(item.strip(), i)
            if not name:
                raise ValueError(f"Action {i} is empty.")
            out.append({"action": name})
        elif isinstance(item, dict):
            name = _name(str(item.get("action", "")).strip(), i)
            if not name:
                raise ValueError(f"Action {i} is missing an `action` field.")
            if name.upper() == "MOUSE" and ("x" in item or "y" in item):
                raise ValueError(f"Action {i} uses legacy MOUSE x/y fields; use row and col.")
            entry = {"action": name}
            for key in ("row", "col"):
                if key in item:
                    v = item[key]
                    v = v if isinstance(v, (int, float, str)) or v is None else str(v)
                    entry[key] = _name(v, i) if isinstance(v, str) else v
            out.append(entry)
        else:
            raise TypeError(f"Action {i} must be a string or a dict.")
    return out
