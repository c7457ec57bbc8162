"""What one action's animation did, in a few hundred characters (the model's action result).

`summarize_animation(before, frames)`: what moved where, what appeared or vanished, what
was visible only mid-way. Runs inside the kernel's worker after every action.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from duck.game.frames import LETTERS, Frame
from duck.game.regions import label_regions

SPRITE_MAX = 256  # regions larger than this are scenery: reported as reshaped, not tracked


def bbox_text(rows: np.ndarray, cols: np.ndarray) -> str:
    r0, r1, c0, c1 = int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())
    rs = f"row {r0}" if r0 == r1 else f"rows {r0}-{r1}"
    cs = f"col {c0}" if c0 == c1 else f"cols {c0}-{c1}"
    return f"{rs}, {cs}"


def _touched(board: Any, mask: np.ndarray) -> tuple[list[tuple], list[tuple]]:
    """Sprites (letter, pixels, top, left, shape key) and scenery regions touching `mask`.
    Only the touched regions are measured, so a small change costs well under a ms."""
    if isinstance(board, Frame):
        grid, labels = board.grid, board.labels()
    else:
        grid = np.asarray(board)
        labels = label_regions(grid)[0]
    sprites, scenery = [], []
    for k in np.unique(labels[mask]).tolist():
        rows, cols = np.nonzero(labels == k)
        r0, c0 = int(rows.min()), int(cols.min())
        letter = LETTERS[int(grid[rows[0], cols[0]]) % 16]
        crop = np.zeros((int(rows.max()) - r0 + 1, int(cols.max()) - c0 + 1), dtype=bool)
        crop[rows - r0, cols - c0] = True
        key = letter + hashlib.sha1(crop.tobytes() + bytes(crop.shape)).hexdigest()[:12]
        item = (letter, len(rows), r0, c0, key)
        (sprites if len(rows) <= SPRITE_MAX else scenery).append(item)
    return sprites, scenery


def _listing(name: str, items: list[str], keep: int = 4) -> str:
    more = f"; +{len(items) - keep} more" if len(items) > keep else ""
    return f"{name}: " + ", ".join(items[:keep]) + more


def change_parts(before: Any, after: Any) -> list[str]:
    """The facts of the change from `before` to `after` (boards that differ; each a `Frame`,
    whose cached segmentation is reused, or an array): cells changed and where, and the
    sprites (regions up to SPRITE_MAX cells, matched by shape hash) moved ((top,left) before
    -> after), appeared or vanished; larger regions that changed are "reshaped"."""
    b_grid = before.grid if isinstance(before, Frame) else np.asarray(before)
    a_grid = after.grid if isinstance(after, Frame) else np.asarray(after)
    changed = b_grid != a_grid
    n_changed = int(changed.sum())
    if n_changed > a_grid.size // 2:
        return [f"board replaced ({n_changed} cells changed)"]
    rows, cols = np.nonzero(changed)
    parts = [f"{n_changed} cells changed in {bbox_text(rows, cols)}"]
    old, old_big = _touched(before, changed)
    new, new_big = _touched(after, changed)
    moved, appeared = [], []
    pool = list(old)
    for obj in new:
        same = [o for o in pool if o[4] == obj[4]]
        if not same:
            appeared.append(f"{obj[0]}{obj[1]}px at ({obj[2]},{obj[3]})")
            continue
        src = min(same, key=lambda o: abs(o[2] - obj[2]) + abs(o[3] - obj[3]))
        pool.remove(src)
        if (src[2], src[3]) != (obj[2], obj[3]):
            moved.append(f"{obj[0]}{obj[1]}px ({src[2]},{src[3]})->({obj[2]},{obj[3]})")
    vanished = [f"{o[0]}{o[1]}px at ({o[2]},{o[3]})" for o in pool]
    reshaped = sorted({f"{o[0]}" for o in old_big + new_big})
    for name, items in (("moved", moved), ("appeared", appeared), ("vanished", vanished)):
        if items:
            parts.append(_listing(name, items))
    if reshaped:
        parts.append("large regions reshaped: " + "".join(reshaped))
    return parts


def summarize_animation(before: Any, frames: Sequence[Any], limit: int = 400) -> str:
    """What one action did, in at most `limit` characters, for the model's action result.

    `before` is the board before the action and `frames` every frame the action returned
    (the last is the new board); each may be a `Frame` (its cached segmentation is reused)
    or an array. Sprites (regions up to SPRITE_MAX cells) are matched by shape hash:
    "moved" gives (top,left) before -> after; larger regions that changed are "reshaped"."""
    if not len(frames):
        return "no frames"
    n = len(frames)
    parts = [f"{n} frame{'s' if n != 1 else ''}"]
    if before is None:
        return parts[0]
    b_grid = before.grid if isinstance(before, Frame) else np.asarray(before)
    last = frames[-1]
    a_grid = last.grid if isinstance(last, Frame) else np.asarray(last)
    parts += change_parts(before, last) if (b_grid != a_grid).any() else ["board unchanged"]
    if n > 2:
        mids = np.asarray([f.grid if isinstance(f, Frame) else f for f in frames[:-1]])
        transient = (mids != b_grid) & (mids != a_grid)
        hit = transient.any(axis=(1, 2))
        if hit.any():
            cells = transient.any(axis=0)
            rows, cols = np.nonzero(cells)
            letters = "".join(sorted({LETTERS[int(v) % 16] for v in np.unique(mids[transient])}))
            idx = np.nonzero(hit)[0]
            parts.append(f"seen only mid-animation: {letters} in {bbox_text(rows, cols)} "
                         f"(frames {int(idx[0]) + 1}-{int(idx[-1]) + 1} of {n})")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
