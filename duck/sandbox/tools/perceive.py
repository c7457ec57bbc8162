"""Perception for model code: objects with stable ids, what changed, what the keys move.

Part of the world-model tools (duck.sandbox.tools); runs inside the kernel's worker, so it uses
numpy and duck.game.frames only. An object is a 4-connected region of one colour, as in
`current_frame.segmentation` (the same `label_regions`), seen as a few numbers (colour, size,
bounding box, a shape key) so that a 27B model can print, filter and compare them cheaply.

Ids: the objects of a history frame get their ids by matching against the frame before it
(the first frame of a level starts afresh, with new numbers): the same colour and shape at the
same place, then the same colour and shape nearest to where it was (it moved), then the same
shape at the same place (it changed colour), then the same colour over an overlapping box (it
grew, shrank, or is a background the others moved over). An object keeps its id as long as
one of these holds from frame to frame. Frames outside the history (a mid-animation frame, a
grid the model built) are matched against the current frame. What changed between two frames,
in these objects, is duck.sandbox.tools.changes.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np

from duck.game.frames import LETTERS, Frame
from duck.game.regions import label_regions

SPRITE_MAX = 256  # regions up to this many cells are pieces; larger ones are scenery in reports
KEYS = ("UP", "DOWN", "LEFT", "RIGHT", "SPACE")


class Obj:
    """One object of one frame. `id` is stable across frames (module docstring)."""

    __slots__ = ("id", "color", "size", "top", "left", "bottom", "right", "shape", "_labels", "_label")

    def __init__(self, color: int, size: int, top: int, left: int, bottom: int, right: int, shape: int,
                 labels: np.ndarray, label: int) -> None:
        self.id = -1
        self.color, self.size, self.shape = color, size, shape
        self.top, self.left, self.bottom, self.right = top, left, bottom, right
        self._labels, self._label = labels, label

    @property
    def letter(self) -> str:
        return LETTERS[self.color % 16]

    @property
    def height(self) -> int:
        return self.bottom - self.top + 1

    @property
    def width(self) -> int:
        return self.right - self.left + 1

    @property
    def pos(self) -> tuple[int, int]:
        return (self.top, self.left)

    @property
    def center(self) -> tuple[float, float]:
        return ((self.top + self.bottom) / 2, (self.left + self.right) / 2)

    def cells(self) -> list[tuple[int, int]]:
        """Every (row, col) of the object."""
        rows, cols = np.nonzero(self._labels[self.top:self.bottom + 1, self.left:self.right + 1] == self._label)
        return [(int(r) + self.top, int(c) + self.left) for r, c in zip(rows, cols)]

    def mask(self) -> np.ndarray:
        """The object's cells inside its bounding box (bool, height x width)."""
        return self._labels[self.top:self.bottom + 1, self.left:self.right + 1] == self._label

    def __repr__(self) -> str:
        return f"#{self.id} {self.letter}{self.color} {self.size}px at ({self.top},{self.left}) {self.height}x{self.width}"


def extract(grid: np.ndarray) -> list[Obj]:
    """The objects of a grid (ids unset), in row-major order of their first cell."""
    g = np.asarray(grid)
    h, w = g.shape
    labels, n = label_regions(g)
    flat = labels.ravel()
    order = np.argsort(flat, kind="stable")
    sizes = np.bincount(flat, minlength=n)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows, cols = order // w, order % w
    top = rows[starts]
    bottom = np.maximum.reduceat(rows, starts)
    left = np.minimum.reduceat(cols, starts)
    right = np.maximum.reduceat(cols, starts)
    colour = g.ravel()[order[starts]]
    rel = ((rows - np.repeat(top, sizes)) * 64 + cols - np.repeat(left, sizes)).astype(np.int16)
    out = []
    ends = (starts + sizes).tolist()
    for k, (s, e) in enumerate(zip(starts.tolist(), ends)):
        out.append(Obj(int(colour[k]), e - s, int(top[k]), int(left[k]), int(bottom[k]), int(right[k]),
                       zlib.crc32(rel[s:e].tobytes()), labels, k))
    return out


def match(prev: Sequence[Obj], cur: Sequence[Obj]) -> dict[int, tuple[Obj, str]]:
    """cur index -> (the prev object it is, how: same / moved / recoloured / reshaped)."""
    out: dict[int, tuple[Obj, str]] = {}
    used: set[int] = set()

    def take(i: int, j: int, how: str) -> None:
        out[i] = (prev[j], how)
        used.add(j)

    exact = {(o.color, o.shape, o.top, o.left): j for j, o in enumerate(prev)}
    for i, o in enumerate(cur):
        j = exact.get((o.color, o.shape, o.top, o.left))
        if j is not None and j not in used:
            take(i, j, "same")
    groups: dict[tuple[int, int], list[int]] = {}
    for j, o in enumerate(prev):
        if j not in used:
            groups.setdefault((o.color, o.shape), []).append(j)
    pairs = []
    for i, o in enumerate(cur):
        if i not in out:
            for j in groups.get((o.color, o.shape), ()):
                pairs.append((abs(prev[j].top - o.top) + abs(prev[j].left - o.left), i, j))
    for _, i, j in sorted(pairs):
        if i not in out and j not in used:
            take(i, j, "moved")
    at = {(o.shape, o.top, o.left): j for j, o in enumerate(prev) if j not in used}
    for i, o in enumerate(cur):
        if i not in out:
            j = at.get((o.shape, o.top, o.left))
            if j is not None and j not in used:
                take(i, j, "recoloured")
    pairs = []
    for i, o in enumerate(cur):
        if i in out:
            continue
        for j, p in enumerate(prev):
            if j in used or p.color != o.color:
                continue
            ov_r = min(p.bottom, o.bottom) - max(p.top, o.top) + 1
            ov_c = min(p.right, o.right) - max(p.left, o.left) + 1
            if ov_r > 0 and ov_c > 0:
                pairs.append((-ov_r * ov_c, abs(p.size - o.size), i, j))
    for *_, i, j in sorted(pairs):
        if i not in out and j not in used:
            take(i, j, "reshaped")
    return out


class Tracker:
    """Objects of the history's frames with ids carried from frame to frame (lazily, cached)."""

    def __init__(self, history: Callable[[], Sequence[Any]]) -> None:
        self.history = history  # () -> the worker's history entries (.frame)
        self.index: dict[int, int] = {}  # id(frame) -> history index
        self.seen = 0
        self.cache: dict[int, list[Obj]] = {}  # history index -> objects with ids
        self.moves: dict[int, list[tuple[Obj, Obj, str]]] = {}  # index -> (before, after, how), changed ones
        self.next_id = 0

    def _index_of(self, frame: Any) -> int | None:
        entries = self.history()
        for i in range(self.seen, len(entries)):
            self.index[id(entries[i].frame)] = i
        self.seen = len(entries)
        i = self.index.get(id(frame))
        return i if i is not None and i < len(entries) and entries[i].frame is frame else None

    def _fresh(self, objs: list[Obj]) -> list[Obj]:
        for o in objs:
            o.id = self.next_id
            self.next_id += 1
        return objs

    def at(self, i: int) -> list[Obj]:
        """Objects of history frame i, tracking forward from the nearest tracked frame."""
        if i in self.cache:
            return self.cache[i]
        entries = self.history()
        start = i
        while start > 0 and start not in self.cache and entries[start - 1].frame.level == entries[i].frame.level:
            start -= 1
        for k in range(start, i + 1):
            if k in self.cache:
                continue
            objs = extract(entries[k].frame.grid)
            prev = self.cache.get(k - 1) if k > 0 and entries[k - 1].frame.level == entries[k].frame.level else None
            if prev is None:
                self.cache[k] = self._fresh(objs)
                continue
            self.cache[k], self.moves[k] = self._link(prev, objs)
        return self.cache[i]

    def _link(self, prev: list[Obj], objs: list[Obj]) -> tuple[list[Obj], list[tuple[Obj, Obj, str]]]:
        found = match(prev, objs)
        changed = []
        for i, o in enumerate(objs):
            if i in found:
                p, how = found[i]
                o.id = p.id
                if how != "same":
                    changed.append((p, o, how))
            else:
                o.id = self.next_id
                self.next_id += 1
        return objs, changed

    def objects(self, frame: Any) -> list[Obj]:
        if isinstance(frame, Frame):
            i = self._index_of(frame)
            if i is not None:
                return self.at(i)
            grid = frame.grid
        else:
            grid = np.asarray(frame)
        objs = extract(grid)
        entries = self.history()
        if not entries:
            return self._fresh(objs)
        ref = self.at(len(entries) - 1)
        if ref and ref[0]._labels.shape != grid.shape:
            return self._fresh(objs)
        return self._link(ref, objs)[0]


# ---------------------------------------------------------------------------------------
# the pieces the keys move

def controlled(tracker: Tracker, current: Any, min_share: float = 0.5, recent: int = 300) -> list[dict[str, Any]]:
    """Objects that moved in at least `min_share` of the key presses that changed the board (the
    last `recent` transitions), most often first: the object as it is now, how many presses
    moved it, and the most common shift per key."""
    entries = tracker.history()
    if not entries:
        return []
    kinds: dict[tuple[int, int], dict[str, Any]] = {}
    effective = 0
    start = max(1, len(entries) - recent)
    for i in range(start, len(entries)):
        name = entries[i].action
        if name not in KEYS:
            continue
        if entries[i].frame.level != entries[i - 1].frame.level:
            continue
        tracker.at(i)
        moves = [(p, o) for p, o, how in tracker.moves.get(i, ()) if how == "moved" and o.size <= SPRITE_MAX]
        if not moves and not np.array_equal(entries[i - 1].frame.grid, entries[i].frame.grid):
            effective += 1
            continue
        if moves:
            effective += 1
        seen = set()
        for p, o in moves:
            key = (o.color, o.shape)
            if key in seen:
                continue
            seen.add(key)
            k = kinds.setdefault(key, {"count": 0, "shifts": {}, "last": o})
            k["count"] += 1
            k["last"] = o
            k["shifts"].setdefault(name, Counter())[(o.top - p.top, o.left - p.left)] += 1
    now = tracker.objects(current) if current is not None else []
    out = []
    for key, k in sorted(kinds.items(), key=lambda kv: -kv[1]["count"]):
        if k["count"] < max(1, min_share * effective):
            continue
        same = [o for o in now if (o.color, o.shape) == key]
        last = k["last"]
        obj = min(same, key=lambda o: abs(o.top - last.top) + abs(o.left - last.left)) if same else None
        out.append({"object": obj if obj is not None else last,
                    "moves": {a: c.most_common(1)[0][0] for a, c in k["shifts"].items()},
                    "moved": f"{k['count']} of {effective} key presses that changed the board",
                    "now_visible": obj is not None})
    return out
