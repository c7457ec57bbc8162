"""The explorer's own small perception: the HUD mask and click targets (regions and their
union-find are duck.game.regions').

* `HudTracker`: learns which edge lines (rows/columns at depth 0..4 from each edge) are a
  HUD: step counters, move budgets, timers, lives. A line at depth 0..2 is HUD once it has
  changed in at least `min_changes` transitions and in at least `min_rate` of all
  transitions of the game. Measured on the 25 public games: every counter found lives in
  the outer three lines (vc33/sp80/lf52 row 0, tn36 row 1, ls20 rows 61-62, s5i5/tu93/bp35
  row 63, r11l col 0...). Community games also draw counters at depth 3-4 (rows 59-60);
  there the play area often reaches too (vc33 clicks at column 61), so such a line must
  tick like a counter: changed in at least 4 and 60% of the transitions.
* `click_targets(grid, hud)`: one click per object, in tiers, never the HUD.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from duck.game.regions import merge_sets, regions

HUD_DEPTH = 5  # HUD lines are searched in the outer 5 rows/columns of each edge
EDGE_DEPTH = 3  # a click target lying entirely in the outer 3 lines is probably a counter


class _Comp(NamedTuple):  # one region, as click_targets reads it
    colour: int
    area: int
    top: int
    left: int
    bottom: int
    right: int
    cy: float
    cx: float


def edge_lines(shape: tuple[int, int] = (64, 64), depth: int = HUD_DEPTH) -> list[tuple[str, int]]:
    """The candidate HUD lines: ('row', r) / ('col', c) within `depth` of an edge."""
    h, w = shape
    out: list[tuple[str, int]] = []
    for d in range(depth):
        out += [("row", d), ("row", h - 1 - d), ("col", d), ("col", w - 1 - d)]
    return out


class HudTracker:
    """Learns the HUD lines of a game from the transitions it sees (see module doc)."""

    def __init__(self, shape: tuple[int, int] = (64, 64), min_changes: int = 2,
                 min_rate: float = 0.2) -> None:
        self.shape = shape
        self.lines = edge_lines(shape)
        self.changes = {ln: 0 for ln in self.lines}
        self.transitions = 0
        self.min_changes = min_changes
        self.min_rate = min_rate
        self.hud: set[tuple[str, int]] = set()
        self.mask = np.zeros(shape, dtype=bool)  # True = HUD pixel, ignored by the state key

    def observe(self, before: np.ndarray, after: np.ndarray) -> bool:
        """Count one transition; True when the mask changed (state keys must be recomputed)."""
        if before.shape != self.shape or after.shape != self.shape:
            return False
        diff = before != after
        self.transitions += 1
        rows = diff.any(axis=1)
        cols = diff.any(axis=0)
        for kind, i in self.lines:
            if (rows if kind == "row" else cols)[i]:
                self.changes[(kind, i)] += 1
        changed = False
        for ln in self.lines:
            n = self.changes[ln]
            deep = self._depth(ln) >= EDGE_DEPTH  # may be play area: needs a ticking counter
            need, rate = (4, 0.6) if deep else (self.min_changes, self.min_rate)
            if ln not in self.hud and n >= need and n >= rate * self.transitions:
                self.hud.add(ln)
                kind, i = ln
                if kind == "row":
                    self.mask[i, :] = True
                else:
                    self.mask[:, i] = True
                changed = True
        return changed

    def _depth(self, ln: tuple[str, int]) -> int:
        kind, i = ln
        size = self.shape[0] if kind == "row" else self.shape[1]
        return min(i, size - 1 - i)

    def key(self, grid: np.ndarray) -> str:
        """The state key: a hash of the grid with the HUD pixels blanked."""
        g = np.array(grid, dtype=np.int8, copy=True)
        if g.shape == self.shape:
            g[self.mask] = -1
        return hashlib.blake2b(g.tobytes() + bytes(g.shape), digest_size=10).hexdigest()


@dataclass(frozen=True)
class Target:
    """One click: (x, y) = (column, row) of a pixel of the object; `cls` groups objects whose
    clicks probably do the same thing (colours + shape), for effect statistics."""

    x: int
    y: int
    tier: int
    cls: str
    area: int


def _object_box(labels: np.ndarray, labs: list[int], top: int, left: int, bottom: int,
                right: int) -> np.ndarray:
    crop = labels[top:bottom + 1, left:right + 1]
    return crop == labs[0] if len(labs) == 1 else np.isin(crop, labs)


def _shape_hash(box: np.ndarray) -> str:
    return hashlib.blake2b(box.tobytes() + bytes([box.shape[0], box.shape[1]]),
                           digest_size=4).hexdigest()


def _pick_pixel(box: np.ndarray, free: np.ndarray, cy: float, cx: float, top: int,
                left: int) -> tuple[int, int] | None:
    """The object's non-HUD pixel nearest to its centroid (row, col), or None."""
    ys, xs = np.nonzero(box & free)
    if not len(ys):
        return None
    d = (ys + top - cy) ** 2 + (xs + left - cx) ** 2
    i = int(np.argmin(d))
    return int(ys[i] + top), int(xs[i] + left)


def lattice(grid: np.ndarray, margin: int = EDGE_DEPTH, fit: float = 0.95) -> tuple[int, int, int] | None:
    """The cell lattice of a board drawn from a coarse grid scaled up (arcengine cameras scale
    an 8x8 or 16x16 level to 64x64): (k, row offset, col offset) when at least `fit` of the
    colour changes between neighbouring pixels (away from the outer `margin` lines, where
    HUDs draw single pixels) fall on lines k apart, for the smallest such k in 4..32 (the
    boundaries of a few large blocks fit every divisor of their size, and most community
    games scale a 16x16 camera by 4); None when there is no such k or too few changes to
    tell (fewer than 3 distinct lines)."""
    g = np.asarray(grid)
    inner = g[margin:g.shape[0] - margin, margin:g.shape[1] - margin]
    cols = np.count_nonzero(inner[:, 1:] != inner[:, :-1], axis=0)  # change before col j+1
    rows = np.count_nonzero(inner[1:, :] != inner[:-1, :], axis=1)
    xs, ys = np.nonzero(cols)[0] + 1 + margin, np.nonzero(rows)[0] + 1 + margin
    if len(xs) + len(ys) < 3 or not len(xs) or not len(ys):
        return None
    wx, wy = cols[xs - 1 - margin], rows[ys - 1 - margin]
    for k in range(4, 33):
        best = []
        for pos, w in ((ys, wy), (xs, wx)):
            hits = np.bincount(pos % k, weights=w, minlength=k)
            o = int(np.argmax(hits))
            if hits[o] < fit * w.sum():
                break
            best.append(o)
        if len(best) == 2:
            return k, best[0], best[1]
    return None


def _neighbour_pairs(labels: np.ndarray, diagonal: bool) -> np.ndarray:
    """Distinct (label, label) pairs of 4-adjacent (or diagonal) pixels."""
    if diagonal:
        parts = [(labels[:-1, :-1], labels[1:, 1:]), (labels[:-1, 1:], labels[1:, :-1])]
    else:
        parts = [(labels[:, :-1], labels[:, 1:]), (labels[:-1, :], labels[1:, :])]
    pairs = np.concatenate([np.stack([a.ravel(), b.ravel()], 1) for a, b in parts])
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return np.unique(pairs, axis=0) if len(pairs) else pairs


class _Board:
    """One board's segmentation as click_targets reads it: regions (`comps`), parts (regions
    of one colour touching at a corner), background parts, objects (touching non-background
    parts); and the targets found so far, `out` (each region's click) and `cells_out` (the
    other cells of a region on a scaled-up grid), each with its sort key."""

    def __init__(self, g: np.ndarray, hud_mask: np.ndarray | None, cells: bool) -> None:
        self.g = g
        self.labels, rt = regions(g)
        n = rt.n
        self.comps = [_Comp(int(rt.colour[i]), int(rt.area[i]), int(rt.top[i]), int(rt.left[i]),
                            int(rt.bottom[i]), int(rt.right[i]), float(rt.cy[i]), float(rt.cx[i]))
                      for i in range(n)]
        hud = hud_mask if hud_mask is not None and hud_mask.shape == g.shape else np.zeros(g.shape, bool)
        self.hud = hud
        self.in_hud = np.bincount(self.labels[hud].ravel(), minlength=n) if hud.any() else np.zeros(n, int)
        self.colour_area = np.bincount(g.ravel().astype(np.int64) & 15, minlength=16)
        colour_of = np.array([c.colour for c in self.comps])
        diag = _neighbour_pairs(self.labels, diagonal=True)
        if len(diag):
            diag = diag[colour_of[diag[:, 0]] == colour_of[diag[:, 1]]]
        part_of = merge_sets(n, diag).tolist()
        self.parts: dict[int, list[int]] = {}
        for i in range(n):
            self.parts.setdefault(part_of[i], []).append(i)
        self.bg: set[int] = set()
        for p, labs in self.parts.items():
            cs = [self.comps[i] for i in labs]
            area = sum(c.area for c in cs)
            touches = any(c.top == 0 or c.left == 0 or c.bottom == g.shape[0] - 1
                          or c.right == g.shape[1] - 1 for c in cs)
            if area >= 0.12 * g.size or (touches and area >= 0.04 * g.size):
                self.bg.add(p)
        touching = [(part_of[a], part_of[b])
                    for a, b in _neighbour_pairs(self.labels, diagonal=False).tolist()]
        object_of = merge_sets(n, [(a, b) for a, b in touching if a not in self.bg and b not in self.bg])
        self.objects: dict[int, list[int]] = {}
        for p in self.parts:
            if p not in self.bg:
                self.objects.setdefault(int(object_of[p]), []).append(p)
        self.grid_cells = lattice(g) if cells else None
        self.out: list[tuple[tuple, Target]] = []
        self.cells_out: list[tuple[tuple, Target]] = []

    def part_area(self, p: int) -> int:
        return sum(self.comps[i].area for i in self.parts[p])

    def add(self, part_ids: list[int], tier: int) -> None:
        """The click of these parts as one target of `tier` (none when all of it is HUD), and
        on a scaled-up grid the other cells of a single multi-cell region."""
        g, hud, comps = self.g, self.hud, self.comps
        labs = [i for p in part_ids for i in self.parts[p]]
        cs = [comps[i] for i in labs]
        area = sum(c.area for c in cs)
        if sum(int(self.in_hud[i]) for i in labs) >= area:
            return
        top, left = min(c.top for c in cs), min(c.left for c in cs)
        bottom, right = max(c.bottom for c in cs), max(c.right for c in cs)
        cy = sum(c.cy * c.area for c in cs) / area
        cx = sum(c.cx * c.area for c in cs) / area
        box = _object_box(self.labels, labs, top, left, bottom, right)
        main = max(part_ids, key=lambda p: (self.part_area(p), -p))
        pick = box if len(part_ids) == 1 else _object_box(self.labels, self.parts[main], top, left, bottom,
                                                          right)
        yx = _pick_pixel(pick, ~hud[top:bottom + 1, left:right + 1], cy, cx, top, left)
        if yx is None:
            yx = _pick_pixel(box, ~hud[top:bottom + 1, left:right + 1], cy, cx, top, left)
        if yx is None:
            return
        y, x = yx
        if tier < 3 and (bottom < EDGE_DEPTH or top > g.shape[0] - 1 - EDGE_DEPTH
                         or right < EDGE_DEPTH or left > g.shape[1] - 1 - EDGE_DEPTH):
            tier = 3  # a thin strip along an edge: most likely a counter or a frame
        colours = sorted({c.colour for c in cs})
        cls = "-".join(map(str, colours)) + ":" + _shape_hash(box)
        rarity = min(int(self.colour_area[c]) for c in colours)
        if self.grid_cells and len(part_ids) == 1 and area >= 2 * self.grid_cells[0] ** 2:
            # a region of several cells of a scaled-up grid: its other cells are clicks too
            # (a domino's two halves, the lit cells of a lights-out board), tried after
            # every region's own click (tier 3); one class of their own
            k, oy, ox = self.grid_cells
            own = ((y - oy) // k, (x - ox) // k)  # the cell the region's own click hits
            for cy_ in range(oy + k // 2 - k * ((oy + k // 2 - top) // k), bottom + 1, k):
                for cx_ in range(ox + k // 2 - k * ((ox + k // 2 - left) // k), right + 1, k):
                    if (cy_ < top or cx_ < left or not box[cy_ - top, cx_ - left] or hud[cy_, cx_]
                            or ((cy_ - oy) // k, (cx_ - ox) // k) == own):
                        continue
                    self.cells_out.append(((3, rarity, k * k, cy_, cx_),
                                           Target(cx_, cy_, 3, cls + "#cell", k * k)))
        self.out.append(((tier, rarity, area, y, x), Target(x, y, tier, cls, area)))


def click_targets(grid: np.ndarray, hud_mask: np.ndarray | None = None,
                  small: int = 150, texture_area: int = 2, texture_copies: int = 10,
                  cells: bool = True) -> list[Target]:
    """Click targets of a board, best first (tier, then rarer colour, then smaller).

    Parts = same-colour pixels connected through edges or corners (so a diagonal line is one
    part). Background = parts covering at least 12% of the board, or touching its border and
    covering at least 4%. Objects = groups of non-background parts that touch (any colours).
    Tiers:
      0: objects of at most `small` pixels (buttons, tiles, pieces), clicked on their
         largest part, nearest to the object's centre
      1: the parts of larger objects, at most `small` pixels each
      2: larger parts, and the other parts of multi-colour small objects
      3: background parts, anything lying in the outer edge lines (counters, frames), and
         all but one copy of a texture (`texture_copies` or more copies of one speck of at
         most `texture_area` pixels)
    HUD pixels are never clicked; a part entirely in the HUD is no target.
    On a board drawn from a scaled-up grid (`lattice`; `cells`), a part covering two or more
    cells gives one target per cell (in its tier, one class): clicks act on cells, and one
    click per region would never reach a region's other cells.
    """
    b = _Board(np.asarray(grid), hud_mask, cells)
    for ps in b.objects.values():
        if sum(b.part_area(p) for p in ps) <= small:
            b.add(ps, 0)
            if len(ps) > 1:
                for p in ps:
                    b.add([p], 2)
        else:
            for p in ps:
                b.add([p], 1 if b.part_area(p) <= small else 2)
    for p in b.bg:
        b.add([p], 3)
    out = b.out
    # a texture (many tiny copies of one speck) is background: keep one copy in its tier
    count: dict[str, int] = {}
    for _, t in out:
        count[t.cls] = count.get(t.cls, 0) + 1
    seen_cls: set[str] = set()
    for i, (k, t) in enumerate(out):
        if t.tier < 3 and t.area <= texture_area and count[t.cls] >= texture_copies:
            if t.cls in seen_cls:
                t = Target(t.x, t.y, 3, t.cls, t.area)
                out[i] = ((3,) + k[1:], t)
            seen_cls.add(t.cls)
    out.sort(key=lambda t: t[0])
    out += sorted(b.cells_out, key=lambda t: t[0])
    seen: set[tuple[int, int]] = set()
    targets = []
    for _, t in out:
        if (t.x, t.y) not in seen:
            seen.add((t.x, t.y))
            targets.append(t)
    return targets
