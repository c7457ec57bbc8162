"""Click feedback: marks some games draw around the last click for many actions.

About 50 of the 246 community games draw a ring and a cross around the last click and animate
them for 8-20 actions: to a state graph every click then leads to a new state and keys that do
nothing look effective. `ClickFeedback` finds out whether a game does this (it is never
assumed) and then gives the explorer a view of the board with the mark painted out. Evidence
of a mark: a key right after a click changes pixels only near it, point-symmetrically, or a far
click puts the pixels near the last one back as they were; either way in a colour no board had
before the first click. A game draws click feedback after 3 pieces of evidence outnumbering the
contrary ones 3 to 1 (on the public games' records, none does). The mark is learned per phase
(actions since the click); until a phase is learned, the pixels near the click in the mark's
colours stand for it. The view paints each mark pixel with the most common colour of the
nearest pixels outside it, so a click's own change to a cell stays visible. The evidence and
the games that shaped it: docs/explorer.md, "Inside", and experiments/LOG.md (2026-12-01).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SEARCH = 6  # Chebyshev radius around a click searched for its mark
SOON = 2  # a key within this many actions of a click can show the mark moving
MATCH = 4  # shared (dy, dx, colour) entries for two clicks' marks to look alike
PHASES = 24  # actions after a click through which the mark is learned (16-20 seen)


def _symmetric(pix: np.ndarray, one: np.ndarray, two: np.ndarray, share: float = 0.8) -> bool:
    """Whether the changed pixels `pix` are point-symmetric about their centre (tried at
    the centroid and the 8 pixels around it: the mark may be drawn at the clicked cell's
    centre rather than the clicked pixel), a pixel and its mirror showing one colour in
    board `one` or in board `two`: a ring and a cross are (drawn over anything, some of
    their pixels are missing), a piece moved one step is not (where it left shows the
    floor, where it arrived the piece)."""
    ys, xs = np.nonzero(pix)
    if len(ys) < 2:
        return False
    best = 0.0
    cy, cx = int(round(ys.mean())), int(round(xs.mean()))
    for oy in (-1, 0, 1):
        for ox in (-1, 0, 1):
            my, mx = 2 * (cy + oy) - ys, 2 * (cx + ox) - xs
            inside = (my >= 0) & (my < pix.shape[0]) & (mx >= 0) & (mx < pix.shape[1])
            if not inside.any():
                continue
            y, x, m_y, m_x = ys[inside], xs[inside], my[inside], mx[inside]
            ok = pix[m_y, m_x] & ((one[y, x] == one[m_y, m_x]) | (two[y, x] == two[m_y, m_x]))
            best = max(best, float(ok.mean()))
    return best >= share


def _window(shape: tuple[int, int], p: tuple[int, int], r: int) -> tuple[slice, slice]:
    y, x = p
    return slice(max(0, y - r), min(shape[0], y + r + 1)), slice(max(0, x - r), min(shape[1], x + r + 1))


class ClickFeedback:
    """See the module docstring. `observe` every transition (raw boards), then `view` the
    board after it; `on` tells whether the game was found to draw click feedback.

    The mark is learned as a template per phase (actions since the click): the board near
    a click is kept at each phase while only the mark moves (keys that change nothing
    farther away); when the next click, far away, leaves that place as it will stay, the
    pixels that differ from it at a phase were the mark at that phase (what the click did
    to the board stays, so it is not taken for the mark)."""

    def __init__(self) -> None:
        self.on = False
        self.evidence = 0
        self.contrary = 0
        self.p: tuple[int, int] | None = None  # (row, col) of the last click
        self.since = 0  # actions since the last click (the mark's phase)
        self.win: tuple[slice, slice] | None = None  # the window around the last click
        self.phases: dict[int, np.ndarray] = {}  # phase -> the raw window at that phase
        self.pure = False  # nothing but the mark changed near the last click since it
        self.changed = False  # the last click changed pixels near its point
        # colours no board showed before the first click: a mark is drawn in one of them
        # (r11l moves a piece to the click point: it looks like a mark, but was there before)
        self.unseen: set[int] | None = None
        self.colours: set[int] = set()  # unseen colours the evidence showed the mark in
        self.marks: list[tuple[tuple[int, int], dict]] = []  # earlier clicks' marks
        self.template: dict[int, set[tuple[int, int, int]]] = {}  # phase -> (dy, dx, colour)
        self.before: np.ndarray | None = None  # the board before the current key
        self.quiet = False  # the last action was a key that moved nothing but the mark
        self.last: np.ndarray | None = None  # the last view

    def observe(self, before: np.ndarray, akey: Any, after: np.ndarray,
                hud: np.ndarray | None = None, ordinary: bool = True) -> bool:
        """Learn from one transition; True when the game was just found to draw click
        feedback. `ordinary`: no level change, GAME_OVER or RESET (whole boards change)."""
        was = self.on
        self.quiet = False
        ok = ordinary and before.shape == after.shape and akey != "R"
        d = before != after
        if hud is not None and hud.shape == d.shape:
            d &= ~hud
        if isinstance(akey, tuple):
            q = (int(akey[2]), int(akey[1]))
            if ok and self.p is not None and self.pure:
                self._settle(q, after, d)
            self.p, self.since = q, 0
            self.win = _window(after.shape, q, SEARCH)
            self.phases = {0: after[self.win].copy()} if ok else {}
            self.pure = ok
            self.changed = ok and bool(d[self.win].any())
            if self.unseen is None:  # the first click: the colours of the board before it
                self.unseen = set(range(16)) - set(np.unique(before).tolist())
        else:
            self.since += 1
            if self.p is not None and self.win is not None and ok:
                self.before = before
                self._key(d, after)
            else:
                self.pure = False
        return self.on and not was

    def _key(self, d: np.ndarray, after: np.ndarray) -> None:
        """A key after the last click: the mark moving alone is evidence (and a phase of
        it to learn); nothing moving near the click right after it counts against."""
        assert self.win is not None
        near = np.zeros_like(d)
        near[self.win] = True
        dn = d & near
        alone = not (d & ~near).any()
        self.quiet = alone and dn.sum() <= 0.4 * near.sum()  # thin: a ring, not a whole tile
        if self.since <= SOON:
            w = self.win
            seen = np.concatenate([self.before[dn], after[dn]])
            if (dn.any() and self.quiet and self._new_colour(seen)
                    and _symmetric(dn[w], self.before[w], after[w])):
                self._evidence(seen)
            elif not dn.any() and self.changed:
                self.contrary += 1
        if self.pure and alone and self.since < PHASES:
            self.phases[self.since] = after[self.win].copy()
        else:
            self.pure = False

    def _settle(self, q: tuple[int, int], after: np.ndarray, d: np.ndarray) -> None:
        """The click at q ends the last click's mark: learn the mark's phases from how the
        place looks now (when q is far enough not to draw its own mark over it)."""
        p, win = self.p, self.win
        assert p is not None and win is not None
        if max(abs(q[0] - p[0]), abs(q[1] - p[1])) <= 2 * SEARCH or 0 not in self.phases:
            return
        final = after[win]
        diff0 = self.phases[0] != final
        if diff0.sum() > 0.4 * diff0.size:
            return  # the new click changed this place: no clean look at it
        oy, ox = win[0].start - p[0], win[1].start - p[1]
        ys, xs = np.nonzero(diff0)
        floor = int(np.bincount(final.ravel().astype(np.int64) & 15).argmax())
        mark = {(int(y + oy), int(x + ox), int(self.phases[0][y, x])):
                -1 if final[y, x] == floor else int(final[y, x])
                for y, x in zip(ys, xs)}  # entry -> the colour under it (-1: the floor)
        if mark:
            if (self._new_colour(self.phases[0][diff0]) and _symmetric(diff0, self.phases[0], final)
                    and any(self._alike(mark, m) for o, m in self.marks if o != p)):
                self._evidence(self.phases[0][diff0])
            self.marks = (self.marks + [(p, mark)])[-8:]
            for k, w in self.phases.items():
                self.template.setdefault(k, set()).update(
                    (int(y + oy), int(x + ox), int(w[y, x])) for y, x in zip(*np.nonzero(w != final)))
        elif self.changed:
            self.contrary += 1  # the click's change near its point stayed

    def _new_colour(self, colours: np.ndarray) -> bool:
        return bool(self.unseen and self.unseen & set(np.unique(colours).tolist()))

    @staticmethod
    def _alike(a: dict, b: dict) -> bool:
        """Two clicks drew the same mark over different boards or over the floor (not a
        highlight of two like pieces, a toggle of two like tiles: the same change over the
        same colours)."""
        shared = a.keys() & b.keys()
        return (len(shared) >= max(MATCH, 0.6 * min(len(a), len(b)))
                and (any(a[e] != b[e] for e in shared) or all(a[e] == -1 for e in shared)))

    def _evidence(self, colours: np.ndarray) -> None:
        self.evidence += 1
        assert self.unseen is not None
        self.colours |= self.unseen & set(np.unique(colours).tolist())
        if self.evidence >= 3 and self.evidence >= 3 * self.contrary:
            self.on = True

    def _hide(self, grid: np.ndarray) -> list[tuple[int, int]]:
        """The pixels of the mark at the current phase: the entries learned for it (or for
        the latest learned phase before it: a mark that stays still for a few actions is
        learned once); before any is learned, the pixels near the click in the colours
        the mark showed (colours no board had before the first click)."""
        p = self.p
        assert p is not None
        h, w = grid.shape
        for k in range(min(self.since, PHASES), -1, -1):
            t = self.template.get(k)
            if t:
                return [(p[0] + dy, p[1] + dx) for dy, dx, c in t
                        if 0 <= p[0] + dy < h and 0 <= p[1] + dx < w and grid[p[0] + dy, p[1] + dx] == c]
        ys, xs = _window(grid.shape, p, SEARCH)
        near = np.isin(grid[ys, xs], list(self.colours))
        return [(int(y + ys.start), int(x + xs.start)) for y, x in zip(*np.nonzero(near))]

    def view(self, grid: np.ndarray) -> np.ndarray:
        """The board with the mark's pixels around the last click painted over: each takes
        the most common colour of the nearest pixels outside the mark (a ring or a cross
        over a cell shows the cell's colour, whatever the click did to it)."""
        if self.on and self.quiet and self.last is not None and self.last.shape == grid.shape:
            return self.last  # a key moved the mark alone (in a phase not learned yet)
        g = grid
        if self.on and self.p is not None:
            hide = self._hide(grid)
            if hide:
                g = np.array(grid, copy=True)
                masked = np.zeros(grid.shape, dtype=bool)
                for y, x in hide:
                    masked[y, x] = True
                for y, x in hide:
                    for r in range(1, SEARCH + 3):
                        ys, xs = _window(grid.shape, (y, x), r)
                        ring = grid[ys, xs][~masked[ys, xs]]
                        if ring.size:
                            g[y, x] = int(np.bincount(ring.astype(np.int64) & 15).argmax())
                            break
        self.last = g
        return g
