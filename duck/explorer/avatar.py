"""What the keys move: finding the controlled object (the avatar) from transitions.

`find_motions(before, after, mask)` explains one transition as translations: regions of the
board before that reappear with the same colour and shape elsewhere after, grouped by offset,
the offset moving the most pixels first (regions over `MAX_AREA` are ignored: a scrolling
background is not an avatar). `Avatar` keeps the avatar's parts, size, each key's offset and
where it is, and re-finds it on a new board by its parts (`locate`), across level changes and
RESETs. Keys not yet seen to move it follow the toolkit's convention (ACTION1-4 = up, down,
left, right) with the step seen on the other keys.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from duck.game.regions import regions

MAX_AREA = 400  # pixels: larger moving regions are scenery, not an avatar
CONVENTION = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}  # key -> (dy, dx) sign


@dataclass(frozen=True)
class Motion:
    dy: int
    dx: int
    top: int  # the mover's box after the move (inclusive bounds)
    left: int
    bottom: int
    right: int
    parts: tuple[tuple[int, int, int, int], ...]  # (colour, area, dy, dx) from the box corner


def find_motions(before: np.ndarray, after: np.ndarray, mask: np.ndarray | None = None) -> list[Motion]:
    """The translations of one transition, the one moving the most pixels first (see the
    module docstring). An avatar stepping from one floor tile onto an identical one shows
    two: itself by d, and the tile it uncovered "moving" by -d; `pick` chooses."""
    if before.shape != after.shape:
        return []
    diff = before != after
    if mask is not None and mask.shape == diff.shape:
        diff &= ~mask
    if not diff.any():
        return []
    lb, tb = regions(before)
    la, ta = regions(after)
    index: dict[tuple[int, int], list[int]] = {}
    for s in np.unique(la[diff]).tolist():
        if ta.area[s] <= MAX_AREA:
            index.setdefault((int(ta.colour[s]), int(ta.area[s])), []).append(s)
    votes: dict[tuple[int, int], list[int]] = {}
    for r in np.unique(lb[diff]).tolist():
        if tb.area[r] > MAX_AREA:
            continue
        h, w = tb.bottom[r] - tb.top[r], tb.right[r] - tb.left[r]
        cb = lb[tb.top[r]:tb.bottom[r] + 1, tb.left[r]:tb.right[r] + 1] == r
        loose = None  # same colour, area and box but another shape: a turned sprite
        for s in index.get((int(tb.colour[r]), int(tb.area[r])), ()):
            dy, dx = int(ta.top[s] - tb.top[r]), int(ta.left[s] - tb.left[r])
            if (dy, dx) == (0, 0) or ta.bottom[s] - ta.top[s] != h or ta.right[s] - ta.left[s] != w:
                continue
            ca = la[ta.top[s]:ta.bottom[s] + 1, ta.left[s]:ta.right[s] + 1] == s
            if np.array_equal(cb, ca):
                votes.setdefault((dy, dx), []).append(s)
                loose = None
                break
            if loose is None:
                loose = ((dy, dx), s)
        if loose is not None:
            votes.setdefault(loose[0], []).append(loose[1])
    out = []
    for d in sorted(votes, key=lambda k: (-sum(int(ta.area[s]) for s in votes[k]),
                                          abs(k[0]) + abs(k[1]), k)):
        ss = votes[d]
        top, left = min(int(ta.top[s]) for s in ss), min(int(ta.left[s]) for s in ss)
        bottom, right = max(int(ta.bottom[s]) for s in ss), max(int(ta.right[s]) for s in ss)
        parts = tuple(sorted((int(ta.colour[s]), int(ta.area[s]), int(ta.top[s]) - top,
                              int(ta.left[s]) - left) for s in ss))
        out.append(Motion(d[0], d[1], top, left, bottom, right, parts))
    return out


def _area(m: Motion) -> int:
    return sum(p[1] for p in m.parts)


@dataclass
class Avatar:
    """The object the keys move (see the module docstring)."""

    parts: tuple[tuple[int, int, int, int], ...] = ()
    size: tuple[int, int] = (0, 0)
    pos: tuple[int, int] | None = None  # top-left of its box on the current board
    moves: dict[int, Counter] = field(default_factory=dict)  # key -> Counter of (dy, dx)
    stays: Counter = field(default_factory=Counter)  # key -> tries that did not move it

    @property
    def known(self) -> bool:
        return bool(self.parts)

    def pick(self, key: int, motions: list[Motion], located: bool) -> Motion | None:
        """The motion of the avatar among a transition's motions: one that fits the known
        avatar; when there is none (or the avatar could not be found before the move, so
        it may have changed), the largest, ties going to the direction the toolkit's
        convention gives `key` (the avatar moves up on ACTION1, its uncovered tile down)."""
        if self.parts:
            fit = [m for m in motions if self.fits(m)]
            if fit or located:
                return fit[0] if fit else None
        if not motions:
            return None
        top = _area(motions[0])
        tied = [m for m in motions if _area(m) == top]
        sy, sx = CONVENTION.get(key, (0, 0))
        return max(tied, key=lambda m: (sy * m.dy + sx * m.dx > 0, -tied.index(m)))

    def fits(self, m: Motion) -> bool:
        """The motion moved (some of) the avatar's parts."""
        mine = {(c, a) for c, a, _, _ in self.parts}
        return bool(mine & {(c, a) for c, a, _, _ in m.parts})

    def learn(self, key: int, m: Motion | None) -> None:
        """Record what `key` did: moved the avatar by `m` (a motion that does not fit a
        known avatar means the avatar changed: it is replaced), or nothing (None)."""
        if m is None:
            self.stays[key] += 1
            return
        if not self.parts or not self.fits(m):  # a known avatar keeps its parts: a tile it
            self.parts = m.parts                 # happens to drag along is not one of them
            self.size = (m.bottom - m.top + 1, m.right - m.left + 1)
        self.moves.setdefault(key, Counter())[(m.dy, m.dx)] += 1
        self.pos = self._anchor_pos(m)

    def _anchor_pos(self, m: Motion) -> tuple[int, int]:
        """The avatar's box corner after motion `m`, from its largest part (the motion may
        include other things that moved the same way)."""
        anchor = max(self.parts, key=lambda p: (p[1], p))
        for c, a, py, px in m.parts:
            if (c, a) == anchor[:2]:
                return m.top + py - anchor[2], m.left + px - anchor[3]
        return m.top, m.left

    def delta(self, key: int) -> tuple[int, int] | None:
        """The offset `key` moves the avatar by: its most frequent one, else the convention
        scaled by the step seen on the other keys; None for a key that never moved it in
        four tries while the others did."""
        c = self.moves.get(key)
        if c:
            return c.most_common(1)[0][0]
        if self.stays[key] >= 4 or key not in CONVENTION or not self.moves:
            return None
        steps = [max(abs(dy), abs(dx)) for cnt in self.moves.values() for dy, dx in cnt]
        s = Counter(steps).most_common(1)[0][0]
        sy, sx = CONVENTION[key]
        return sy * s, sx * s

    def sweep(self, p: tuple[int, int], q: tuple[int, int], shape: tuple[int, int]) -> tuple | None:
        """(row from, row to, column from, column to) that the avatar's box sweeps into going
        from `p` to `q` on a board of `shape` (the leading strip of an axis move, gap
        included: a corridor between two nodes counts; the box at `q` for other moves); None
        when `q` leaves the board."""
        h, w = self.size
        if q[0] < 0 or q[1] < 0 or q[0] + h > shape[0] or q[1] + w > shape[1]:
            return None
        dy, dx = q[0] - p[0], q[1] - p[1]
        if dy and dx:
            return q[0], q[0] + h, q[1], q[1] + w
        r0, r1 = (p[0] + h, q[0] + h) if dy > 0 else ((q[0], p[0]) if dy < 0 else (q[0], q[0] + h))
        c0, c1 = (p[1] + w, q[1] + w) if dx > 0 else ((q[1], p[1]) if dx < 0 else (q[1], q[1] + w))
        return r0, r1, c0, c1

    def regular(self) -> bool:
        """True when every key's moves are one constant offset (a walker on a lattice, not an
        ice slide or a teleporting piece): path planning on a lattice then predicts moves."""
        total = sum(sum(c.values()) for c in self.moves.values())
        top = sum(c.most_common(1)[0][1] for c in self.moves.values() if c)
        return total > 0 and top >= 0.8 * total

    def locate(self, grid: np.ndarray) -> tuple[int, int] | None:
        """Where the avatar is on `grid` (nearest to its last position when it appears
        several times), by its parts; None when it is not there."""
        if not self.parts:
            return None
        _, t = regions(grid)
        at: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for c, a, y, x in zip(t.colour.tolist(), t.area.tolist(), t.top.tolist(), t.left.tolist()):
            at.setdefault((c, a), []).append((y, x))
        anchor = max(self.parts, key=lambda p: (p[1], p))
        h, w = self.size
        found = []
        for y, x in at.get(anchor[:2], ()):
            top, left = y - anchor[2], x - anchor[3]
            # the other parts anywhere in the box (a turned sprite moves its small parts)
            if all(any(top <= py < top + h and left <= px < left + w for py, px in at.get((c, a), ()))
                   for c, a, _, _ in self.parts):
                found.append((top, left))
        if not found:
            return None
        last = self.pos or (0, 0)
        return min(found, key=lambda p: (abs(p[0] - last[0]) + abs(p[1] - last[1]), p))
