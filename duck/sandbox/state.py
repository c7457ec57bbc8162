"""The game state the worker is told: the host's copy of the model's game variables.

The host owns the game; the worker keeps the variables model code reads (`current_frame`,
`history`, `transitions`, `last_animation`, `last_action_result`, `valid_actions`, `notes`:
duck.sandbox.worker). The host keeps enough to tell a fresh worker all of it after a restart,
and sends only what is new otherwise (`delta`): each history entry once, with its animation
frames, so an action costs the same at step 1,000 as at step 10.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from duck.game.source import Observation


class GameState:
    """History entries (action display, step, level) with their boards, the animation frames
    not sent yet, the last action result, `valid_actions`, the notes dict, and how many entries
    the worker has (`synced`)."""

    def __init__(self, valid: list[str]) -> None:
        self.entries: list[tuple[str, int, int]] = []  # (action display, step, level)
        self.grids: list[np.ndarray] = []
        self.last_anim: list[np.ndarray] = []
        self.anims: dict[int, list[np.ndarray]] = {}  # entry -> its frames, until the worker has them
        self.last_result: dict[str, Any] = {}  # `last_action_result`
        self.notes: dict[str, Any] = {}
        self.valid = valid
        self.synced = 0  # entries the worker has

    def append(self, text: str, obs: Observation, step: int, level: int) -> None:
        """One history entry: the first board (`text` ""), or an action's with its frames."""
        self.entries.append((text, step, level))
        self.grids.append(obs.grid)
        if text:
            self.last_anim = list(obs.frames)
            self.anims[len(self.entries) - 1] = self.last_anim

    def delta(self) -> tuple[dict[str, Any], bytes]:
        """The entries the receiver lacks (from `synced`) with every animation frame of each
        action the worker has not had yet, or, after a restart, of the last action only; then
        the last result and `valid_actions`. Call `sent()` once it is on its way. (A call's
        process hears of its own actions; the worker, which outlives it, at the next call.)"""
        items, blobs = [], []
        end = len(self.entries)
        for i in range(self.synced, end):
            text, step, level = self.entries[i]
            frames = self.anims.get(i) or (self.last_anim if (i == end - 1 and text and self.last_anim)
                                           else [self.grids[i]])
            items.append({"a": text, "s": step, "l": level, "n": len(frames),
                          "shape": list(frames[-1].shape)})
            blobs += [np.ascontiguousarray(f, dtype=np.int8).tobytes() for f in frames]
        return {"entries": items, "last_result": self.last_result, "valid": self.valid}, b"".join(blobs)

    def sent(self) -> None:
        self.synced = len(self.entries)

    def settled(self) -> None:
        """The worker has every entry: their animation frames need not be kept."""
        self.anims = {i: f for i, f in self.anims.items() if i >= self.synced}
