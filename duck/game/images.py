"""The images the model is shown, rendered from grids: the board, and a diff of two boards.

Every image is a pure function of (kind, grids, scale), so the conversation file stores the
grids instead of the PNG and rebuilds it bit for bit. `render(kind, grids, scale)` is the one
entry point: `board` (the ARC palette, `scale` x `scale` pixels a cell) or `diff` (the after
board with every changed cell in its own colour and every unchanged cell dimmed).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from duck.game.frames import PALETTE, grid_png, rgb_png

DIM_TO = 128  # unchanged cells are blended towards this grey...
DIM_SHARE = 0.75  # ...by this share


def diff_png(before: np.ndarray, after: np.ndarray, scale: int = 10) -> bytes:
    """`after` with its changed cells in colour and the rest dimmed."""
    b, a = np.asarray(before, dtype=np.int64), np.asarray(after, dtype=np.int64)
    rgb = PALETTE[a & 15].astype(np.float64)
    same = (b == a) if b.shape == a.shape else np.zeros(a.shape, dtype=bool)
    rgb[same] = rgb[same] * (1 - DIM_SHARE) + DIM_TO * DIM_SHARE
    rgb = np.rint(rgb).astype(np.uint8).repeat(scale, axis=0).repeat(scale, axis=1)
    return rgb_png(rgb)


def render(kind: str, grids: Sequence[np.ndarray], scale: int) -> bytes:
    """The PNG of one image spec; raises ValueError for an unknown kind or wrong grid count."""
    if kind == "board" and len(grids) == 1:
        return grid_png(grids[0], scale)
    if kind == "diff" and len(grids) == 2:
        return diff_png(grids[0], grids[1], scale)
    raise ValueError(f"no image {kind!r} of {len(grids)} grids")


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header; (0, 0) for anything else."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        return 0, 0
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
