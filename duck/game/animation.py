"""What one action's animation did, in a few hundred characters (the model's action result), and
the object facts of any change from one board to another.

`change_parts(before, after)`: the facts of a change, each true of the two boards (a checker
proves it over the public games: `duck bench facts`). Objects are the 4-connected one-colour
regions of each board; each region holding a changed cell is matched to the same-colour regions
sharing cells with it on the other board until the group is closed, and a group is one fact
(moved, resized, reshaped, split, merged, regrouped, vanished, appeared, recoloured; regions
over SPRITE_MAX cells by colour only; the formats: docs/agent.md). The HUD border (the
outer HUD_BORDER rows and columns) is one `HUD:` part, and the first part counts and bounds
only the cells changed away from it. `summarize_animation(before, frames)` adds the frame count
and what was visible only mid-way; it runs inside the kernel's worker after every action. An
action that completed a level is described up to its last frame before the switch to the next
level, the board that completed the level (DESIGN §1b).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from duck.game.frames import LETTERS, Frame
from duck.game.regions import label_regions

SPRITE_MAX = 256  # regions larger than this are scenery: named by colour, not tracked
HUD_BORDER = 4  # FIELD §3: the field's harness flags changes away from a 4-cell border
LISTED = 4  # items shown per kind (then "(+k more)")
SIDE = 3  # regions written out per side of a group (then "k Y regions (Npx)")


def inside(shape: tuple[int, int], border: int) -> np.ndarray:
    """The cells away from the HUD border (all cells when `border` is 0)."""
    mask = np.zeros(shape, dtype=bool)
    h, w = shape
    if h > 2 * border and w > 2 * border:
        mask[border:h - border, border:w - border] = True
    return mask


def bbox_text(rows: np.ndarray, cols: np.ndarray) -> str:
    r0, r1, c0, c1 = int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())
    rs = f"row {r0}" if r0 == r1 else f"rows {r0}-{r1}"
    cs = f"col {c0}" if c0 == c1 else f"cols {c0}-{c1}"
    return f"{rs}, {cs}"


def grid_of(board: Any) -> np.ndarray:
    return board.grid if isinstance(board, Frame) else np.asarray(board)


def labels_of(board: Any) -> np.ndarray:
    return board.labels() if isinstance(board, Frame) else label_regions(np.asarray(board))[0]


@dataclass(frozen=True)
class Region:
    """One region of one board: colour letter, cells (flat indices), top-left of its box."""

    side: int  # 0: the board before, 1: after
    label: int
    letter: str
    cells: np.ndarray
    top: int
    left: int
    key: str  # colour and shape: equal keys are the same sprite
    hud: bool  # every cell in the HUD border

    @property
    def px(self) -> int:
        return len(self.cells)

    def text(self) -> str:
        return f"{self.letter}{self.px}px at ({self.top},{self.left})"


class _Board:
    """A board's grid and labels, and its regions measured on demand."""

    def __init__(self, board: Any, side: int, band: np.ndarray) -> None:
        self.grid, self.labels, self.side, self.band = grid_of(board).ravel(), labels_of(board), side, band
        self.flat = self.labels.ravel()
        self.width = self.labels.shape[1]
        self.cache: dict[int, Region] = {}

    def region(self, k: int) -> Region:
        if k not in self.cache:
            cells = np.flatnonzero(self.flat == k)
            rows, cols = cells // self.width, cells % self.width
            r0, c0 = int(rows.min()), int(cols.min())
            letter = LETTERS[int(self.grid[cells[0]]) % 16]
            crop = np.zeros((int(rows.max()) - r0 + 1, int(cols.max()) - c0 + 1), dtype=bool)
            crop[rows - r0, cols - c0] = True
            key = letter + hashlib.sha1(crop.tobytes() + bytes(crop.shape)).hexdigest()[:12]
            self.cache[k] = Region(self.side, k, letter, cells, r0, c0, key, bool(self.band[cells].all()))
        return self.cache[k]


def _groups(before: Any, after: Any, changed: np.ndarray, band: np.ndarray) -> list[tuple[list[Region], list[Region]]]:
    """The regions holding a changed cell, each joined to the same-colour regions it shares
    cells with on the other board, closed: (regions before, regions after) per group."""
    boards = (_Board(before, 0, band.ravel()), _Board(after, 1, band.ravel()))
    todo = [(s, int(k)) for s in (0, 1) for k in np.unique(boards[s].flat[changed.ravel()])]
    seen = set(todo)
    links: dict[tuple[int, int], set[tuple[int, int]]] = {}
    while todo:
        s, k = todo.pop()
        r, other = boards[s].region(k), boards[1 - s]
        keep = r.cells[other.grid[r.cells] == boards[s].grid[r.cells[0]]]
        for k2 in np.unique(other.flat[keep]).tolist():
            node = (1 - s, k2)
            links.setdefault((s, k), set()).add(node)
            links.setdefault(node, set()).add((s, k))
            if node not in seen:
                seen.add(node)
                todo.append(node)
    out, done = [], set()
    for start in sorted(seen):
        if start in done:
            continue
        stack, members = [start], []
        done.add(start)
        while stack:
            node = stack.pop()
            members.append(node)
            for n in links.get(node, ()):
                if n not in done:
                    done.add(n)
                    stack.append(n)
        regs = sorted((boards[s].region(k) for s, k in members), key=lambda r: (r.top, r.left))
        out.append(([r for r in regs if r.side == 0], [r for r in regs if r.side == 1]))
    return out


def _side(regions: list[Region]) -> str:
    if len(regions) <= SIDE:
        return " + ".join(r.text() for r in regions)
    return f"{len(regions)} {regions[0].letter} regions ({sum(r.px for r in regions)}px)"


def _listing(name: str, items: list[str]) -> str:
    more = f" (+{len(items) - LISTED} more)" if len(items) > LISTED else ""
    return f"{name}: " + ", ".join(items[:LISTED]) + more


def _hud(b: np.ndarray, a: np.ndarray, changed: np.ndarray, band: np.ndarray) -> str | None:
    n = int((changed & band).sum())
    if not n:
        return None
    counts = [(LETTERS[v % 16], int((b[band] == v).sum()), int((a[band] == v).sum())) for v in range(16)]
    counts = sorted((c for c in counts if c[1] != c[2]), key=lambda c: max(c[1], c[2]))[:3]  # bars before floors
    return f"HUD: {n} cell{'s' if n != 1 else ''} changed" + "".join(f", {x} {p} -> {q} cells" for x, p, q in counts)


def change_parts(before: Any, after: Any, border: int = HUD_BORDER) -> list[str]:
    """The facts of the change from `before` to `after` (boards of one shape that differ; each
    a `Frame`, whose cached segmentation is reused, or an array), one part per group of regions;
    each part's format: docs/agent.md, "The facts of a change"."""
    b, a = grid_of(before), grid_of(after)
    changed = b != a
    n_changed = int(changed.sum())
    if n_changed > a.size // 2:
        return [f"board replaced ({n_changed} cells changed)"]
    band = ~inside(a.shape, border)
    parts = []
    if (inner := changed & ~band).any():
        rows, cols = np.nonzero(inner)
        parts.append(f"{int(inner.sum())} cell{'s' if inner.sum() != 1 else ''} changed in {bbox_text(rows, cols)}")
    kinds: dict[str, list[str]] = {k: [] for k in ("moved", "recoloured", "resized", "reshaped", "split", "merged",
                                                   "regrouped")}
    gone, new, large = [], [], set()
    for old, now in _groups(before, after, changed, band):
        if any(r.px > SPRITE_MAX for r in old + now):
            large.update(r.letter for r in old + now)
        elif all(r.hud for r in old + now):
            continue
        elif not now:
            gone += old
        elif not old:
            new += now
        elif len(old) == 1 and len(now) == 1:
            o, n = old[0], now[0]
            if o.key == n.key:
                kinds["moved"].append(f"{n.letter}{n.px}px ({o.top},{o.left})->({n.top},{n.left})")
            else:
                kinds["resized" if o.px != n.px else "reshaped"].append(f"{o.text()} -> {n.text()}")
        else:
            name = "split" if len(old) == 1 else "merged" if len(now) == 1 else "regrouped"
            kinds[name].append(f"{_side(old)} -> {_side(now)}")
    for n in list(new):  # a sprite that left all its cells and arrived whole elsewhere moved
        same = [o for o in gone if o.key == n.key]
        if same:
            o = min(same, key=lambda o: abs(o.top - n.top) + abs(o.left - n.left))
            gone.remove(o)
            new.remove(n)
            kinds["moved"].append(f"{n.letter}{n.px}px ({o.top},{o.left})->({n.top},{n.left})")
    for n in list(new):  # the same cells in another colour
        same = [o for o in gone if np.array_equal(o.cells, n.cells)]
        if same:
            gone.remove(same[0])
            new.remove(n)
            kinds["recoloured"].append(f"{same[0].text()} -> {n.letter}")
    kinds["appeared"] = [r.text() for r in new]
    kinds["vanished"] = [r.text() for r in gone]
    parts += [_listing(name, items) for name, items in kinds.items() if items]
    if large:
        parts.append(f"large regions (over {SPRITE_MAX} cells) changed: " + "".join(sorted(large)))
    if hud := _hud(b, a, changed, band):
        parts.append(hud)
    return parts


def won_frame(before: Any, frames: Sequence[Any]) -> int | None:
    """The index of the last frame before a switch to the next level (the board that completed
    the level) when the frames' `level` rose over the action, else None. The switch is the last
    frame: the frame before it is nearer the board before the action than the next level's first
    board in 18 of 18 animated level-ups of the explorer's 500 actions on each public game
    (`duck bench facts`, `level_ups`)."""
    lv0, lv1 = getattr(before, "level", None), getattr(frames[-1], "level", None) if len(frames) else None
    if lv0 is None or lv1 is None or lv1 <= lv0 or len(frames) < 2:
        return None
    return len(frames) - 2


def _fit(parts: list[str], limit: int) -> str:
    """Whole parts joined while they fit in `limit` characters, then "..." (never a cut claim)."""
    out = parts[0]
    for k, p in enumerate(parts[1:], 1):
        tail = "" if k == len(parts) - 1 else "; ..."
        if len(out) + 2 + len(p) + len(tail) > limit:
            return out + "; ..."
        out += "; " + p
    return out


def summarize_animation(before: Any, frames: Sequence[Any], limit: int = 400) -> str:
    """What one action did, in at most `limit` characters, for the model's action result.

    `before` is the board before the action and `frames` every frame the action returned
    (the last is the new board); each may be a `Frame` (its cached segmentation is reused)
    or an array. The change's facts are `change_parts`; mid frames with cells in a colour
    neither board has there are "seen only mid-animation". An action that completed a level
    is described up to the board that completed it (`won_frame`)."""
    if not len(frames):
        return "no frames"
    n = len(frames)
    parts = [f"{n} frame{'s' if n != 1 else ''}"]
    if before is None:
        return parts[0]
    won = won_frame(before, frames)
    if won is not None:
        level = getattr(before, "level")
        parts.append(f"level {level} completed: facts up to frame {won + 1} of {n}, the board that completed it "
                     f"(frame {n} is level {level + 1}'s first board)")
        frames = frames[:won + 1]
    b_grid, last = grid_of(before), frames[-1]
    a_grid = grid_of(last)
    if b_grid.shape != a_grid.shape:
        parts.append(f"the board changed size ({b_grid.shape[0]}x{b_grid.shape[1]} -> "
                     f"{a_grid.shape[0]}x{a_grid.shape[1]})")
        return _fit(parts, limit)
    parts += change_parts(before, last) if (b_grid != a_grid).any() else ["board unchanged"]
    mids = [grid_of(f) for f in frames[:-1]]
    if len(mids) > 1 and all(m.shape == b_grid.shape for m in mids):
        mids = np.asarray(mids)
        transient = (mids != b_grid) & (mids != a_grid)
        hit = transient.any(axis=(1, 2))
        if hit.any():
            rows, cols = np.nonzero(transient.any(axis=0))
            letters = "".join(sorted({LETTERS[int(v) % 16] for v in np.unique(mids[transient])}))
            idx = np.nonzero(hit)[0]
            parts.append(f"seen only mid-animation: {letters} in {bbox_text(rows, cols)} "
                         f"(frames {int(idx[0]) + 1}-{int(idx[-1]) + 1} of {n})")
    return _fit(parts, limit)
