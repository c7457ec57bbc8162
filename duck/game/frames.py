"""Frames as the model sees them: letters, objects, and what an animation did.

`Frame` is the read-only view of one 64x64 board that model-written code gets inside the
kernel (DESIGN §3). Its public surface is the Duck's (`.ascii`, `.segmentation`, `.step`,
`.level`, `.shape`, `str()` = `AsciiFrameView(level=L, step=S, shape=64x64)`) so the Duck's
recorded code runs unchanged, plus `.grid`, a read-only numpy array.

`segment_with_labels(grid)` reproduces the Duck's segmentation bit for bit (its format:
docs/agent.md), because recorded snippets compare hashes and click on boundary corners copied
from earlier output (../shared/duck-traces/README.md, "Sandbox API").

Connected components live in duck.game.regions, animation summaries in duck.game.animation.

`grid_png(grid)`: a board as a PNG in the ARC palette (the model's image, the report's frames).
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import numpy as np

from duck.game.regions import label_regions

LETTERS = "WwgGcBMPRbSYOrNp"
_LUT = np.frombuffer(LETTERS.encode(), dtype=np.uint8)

# Moore neighbours clockwise from NW (row grows downwards).
_CW = ((-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1))
# "(r, c)" for every relative cell of a 64x64 board: joining these reproduces
# repr(list_of_tuples) ~10x faster than repr itself.
_PAIR = [f"({r}, {c})" for r in range(64) for c in range(64)]
# After stepping to neighbour j, the backtrack cell (neighbour j-1 of the old cell) is
# neighbour _BACK[j] of the new one.
_BACK = tuple(_CW.index((_CW[(j + 7) % 8][0] - _CW[j][0], _CW[(j + 7) % 8][1] - _CW[j][1]))
              for j in range(8))


# The official ARC-AGI-3 palette, colour index -> RGB: arc_agi.rendering.COLOR_MAP, copied
# because that module imports matplotlib, too heavy for the kernel's worker (a test compares).
PALETTE = np.array([[int(h[k:k + 2], 16) for k in (1, 3, 5)] for h in (
    "#FFFFFF", "#CCCCCC", "#999999", "#666666", "#333333", "#000000", "#E53AA3", "#FF7BCC",
    "#F93C31", "#1E93FF", "#88D8F1", "#FFDC00", "#FF851B", "#921231", "#4FCC30", "#A356D6")],
    dtype=np.uint8)


def rgb_png(rgb: np.ndarray) -> bytes:
    """An (h, w, 3) uint8 image as a PNG (every image the model is shown is written here)."""
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def grid_png(grid: np.ndarray, scale: int = 4) -> bytes:
    """The board as a PNG in the ARC palette, each cell `scale` x `scale` pixels."""
    return rgb_png(PALETTE[np.asarray(grid, dtype=np.int64) & 15].repeat(scale, axis=0).repeat(scale, axis=1))


def to_ascii(grid: np.ndarray) -> str:
    """64 lines of letters joined by newlines, no trailing newline."""
    g = np.clip(np.asarray(grid), 0, 15).astype(np.intp)
    h, w = g.shape
    out = np.full((h, w + 1), ord("\n"), dtype=np.uint8)
    out[:, :w] = _LUT[g]
    return out.tobytes()[:-1].decode()


def _trace(lab: list[int], k: int, start: int, width: int, cap: int) -> list[int]:
    """Moore-neighbour contour of region k in a padded, flattened label list."""
    offs = [dr * width + dc for dr, dc in _CW] * 2
    back_of = _BACK
    contour = [start]
    b = start
    idx = 7  # backtrack = W neighbour
    second = None
    for _ in range(cap):
        nxt = -1
        for j in range(idx + 1, idx + 9):
            cand = b + offs[j]
            if lab[cand] == k:
                nxt = cand
                break
        if nxt < 0:
            break
        if second is None:
            second = nxt
        elif b == start and nxt == second:
            break
        contour.append(nxt)
        idx = back_of[j % 8]
        b = nxt
    if len(contour) > 1 and contour[-1] == contour[0]:
        contour.pop()
    return contour


def _corners(contour: list[int], pw: int) -> list[list[int]]:
    """Contour cells (flat indices in the padded board) where the direction changes.
    With a padded width of 66 every unit step has its own flat difference."""
    m = len(contour)
    if m <= 2:
        keep = contour
    else:
        keep = [c for p, c, n in zip(contour[-1:] + contour[:-1], contour, contour[1:] + contour[:1])
                if c - p != n - c]
    return [[c // pw - 1, c % pw - 1] for c in keep]


def _enclosers(n: int, edges: np.ndarray, on_edge: np.ndarray) -> list[list[int]]:
    """For every region, the regions that separate it from the board edge.

    Region b encloses a iff every path from a to a virtual node E (linked to all regions
    touching the border) passes through b: b is a DFS-tree ancestor of a whose child w on
    the path has low[w] >= disc[b]."""
    adj: list[list[int]] = [[] for _ in range(n + 1)]
    for i, j in edges.tolist():
        adj[i].append(j)
        adj[j].append(i)
    root = n
    for i in np.nonzero(on_edge)[0].tolist():
        adj[root].append(i)
        adj[i].append(root)
    disc = [-1] * (n + 1)
    low = [0] * (n + 1)
    par = [-1] * (n + 1)
    disc[root] = low[root] = 0
    t = 1
    stack = [(root, iter(adj[root]))]
    while stack:
        v, it = stack[-1]
        for u in it:
            if disc[u] < 0:
                disc[u] = low[u] = t
                t += 1
                par[u] = v
                stack.append((u, iter(adj[u])))
                break
            if u != par[v] and disc[u] < low[v]:
                low[v] = disc[u]
        else:
            stack.pop()
            p = par[v]
            if p >= 0 and low[v] < low[p]:
                low[p] = low[v]
    out: list[list[int]] = []
    for a in range(n):
        encl = []
        w, b = a, par[a]
        while b != root and b >= 0:
            if low[w] >= disc[b]:
                encl.append(b)
            w, b = b, par[b]
        out.append(encl)
    return out


def segment_with_labels(grid: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """The Duck's segmentation of one board (`Frame.segmentation`), bit for bit (its format:
    docs/agent.md, "The board's segmentation"), and the region id of every cell (an int32 array
    like the grid)."""
    g = np.clip(np.asarray(grid), 0, 15).astype(np.int8)
    h, w = g.shape
    labels, n = label_regions(g)
    flat = labels.ravel()
    pixels = np.bincount(flat, minlength=n)
    order = np.argsort(flat, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(pixels)])
    colours = g.ravel()[order[bounds[:-1]]]  # colour of each region's first cell

    # adjacency
    ha, hb = labels[:, :-1].ravel(), labels[:, 1:].ravel()
    va, vb = labels[:-1, :].ravel(), labels[1:, :].ravel()
    a = np.concatenate([ha, va]).astype(np.int64)
    b = np.concatenate([hb, vb]).astype(np.int64)
    m = a != b
    lo, hi = np.minimum(a[m], b[m]), np.maximum(a[m], b[m])
    codes = np.unique(lo * n + hi)
    edges = np.stack([codes // n, codes % n], axis=1) if len(codes) else np.zeros((0, 2), np.int64)

    # containment
    on_edge = np.zeros(n, dtype=bool)
    on_edge[labels[0, :]] = True
    on_edge[labels[-1, :]] = True
    on_edge[labels[:, 0]] = True
    on_edge[labels[:, -1]] = True
    enclosers = _enclosers(n, edges, on_edge)
    children: list[list[int]] = [[] for _ in range(n)]
    for a_id in range(n):
        if enclosers[a_id]:
            parent = max(enclosers[a_id], key=lambda e: (len(enclosers[e]), -e))
            children[parent].append(a_id)

    # boundaries work on a padded flat label list (border = -1)
    padded = np.full((h + 2, w + 2), -1, dtype=np.int32)
    padded[1:-1, 1:-1] = labels
    lab = padded.ravel().tolist()
    pw = w + 2
    rows = order // w
    cols = order % w
    starts = bounds[:-1]
    r0s = rows[starts]
    c0s = np.minimum.reduceat(cols, starts)
    stride = max(64, w)
    rel = ((rows - np.repeat(r0s, pixels)) * stride + cols - np.repeat(c0s, pixels)).tolist()
    first_flat = ((r0s + 1) * pw + cols[starts] + 1).tolist()
    bl = bounds.tolist()
    px = pixels.tolist()
    letters = [LETTERS[v] for v in colours.tolist()]
    sha1 = hashlib.sha1
    pair = _PAIR
    nodes = []
    for k in range(n):
        s, e = bl[k], bl[k + 1]
        letter = letters[k]
        if h <= 64 and w <= 64:
            text = f"('{letter}', [" + ", ".join([pair[i] for i in rel[s:e]]) + "])"
        else:
            text = repr((letter, [divmod(i, stride) for i in rel[s:e]]))
        digest = sha1(text.encode()).hexdigest()[:16]
        start = first_flat[k]
        contour = [start] if px[k] == 1 else _trace(lab, k, start, pw, 8 * px[k] + 16)
        nodes.append({"id": k, "color": letter, "hash": digest, "pixels": px[k],
                      "boundary": _corners(contour, pw), "children": sorted(children[k])})
    return {"nodes": nodes, "adjacency_list": edges.tolist()}, labels


class Frame:
    """One board as model code sees it. Cheap to create; letters and objects are computed
    on first access and cached, so history frames nobody looks at cost nothing."""

    __slots__ = ("_grid", "step", "level", "_ascii", "_seg", "_labels")

    def __init__(self, grid: np.ndarray, step: int = 0, level: int = 1) -> None:
        arr = np.array(grid, dtype=np.int8, copy=True)
        arr.flags.writeable = False
        self._grid = arr
        self.step = step
        self.level = level
        self._ascii: str | None = None
        self._seg: dict[str, Any] | None = None
        self._labels: np.ndarray | None = None

    @property
    def grid(self) -> np.ndarray:
        """The colour indices 0-15 as a read-only int8 array (copy it to modify)."""
        return self._grid

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self._grid.shape[0]), int(self._grid.shape[1]))

    @property
    def ascii(self) -> str:
        if self._ascii is None:
            self._ascii = to_ascii(self._grid)
        return self._ascii

    @property
    def segmentation(self) -> dict[str, Any]:
        if self._seg is None:
            self._seg, self._labels = segment_with_labels(self._grid)
        return self._seg

    def labels(self) -> np.ndarray:
        """Region id per cell (the segmentation's node ids), cached; cheaper than
        `.segmentation` when only the regions are needed."""
        if self._labels is None:
            self._labels = label_regions(self._grid)[0]
        return self._labels

    def __str__(self) -> str:
        rows, cols = self.shape
        return f"AsciiFrameView(level={self.level}, step={self.step}, shape={rows}x{cols})"

    __repr__ = __str__
