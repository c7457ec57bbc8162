"""Connected components of a board: the one implementation for the project.

`merge_sets` is the union-find; `label_regions` numbers the 4-connected equal-colour
regions (the Duck segmentation's node order, duck.game.frames.Frame.segmentation); `regions` adds
each region's measures (`RegionTable`), which the explorer's perception builds on
(duck.explorer.vision, avatar, nav, push).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def merge_sets(n: int, pairs: Any) -> np.ndarray:
    """Union-find over the elements 0..n-1 joined by `pairs` ((k, 2) ints, in any order).

    Returns, for every element, the smallest element of its set: the one union-find of the
    project (regions here, the explorer's parts and objects in duck.explorer.vision)."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    for x, y in zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()):
        x, y = find(x), find(y)
        if x != y:
            if x < y:
                parent[y] = x
            else:
                parent[x] = y
    return np.fromiter((find(i) for i in range(n)), dtype=np.int64, count=n)


def label_regions(grid: np.ndarray) -> tuple[np.ndarray, int]:
    """4-connected equal-value regions, numbered by their first cell in row-major order.

    Works on horizontal runs (a few hundred per board) with union-find, so it costs about a
    millisecond instead of a per-cell flood fill."""
    g = np.asarray(grid)
    h, w = g.shape
    starts_mask = np.ones((h, w), dtype=bool)
    starts_mask[:, 1:] = g[:, 1:] != g[:, :-1]
    n_runs = int(starts_mask.sum())
    run_id = (np.cumsum(starts_mask.ravel()) - 1).reshape(h, w)  # run index of every cell
    # Vertical unions: cells equal to the cell above join their runs.
    same = g[1:, :] == g[:-1, :]
    a = run_id[1:, :][same]
    b = run_id[:-1, :][same]
    pairs = np.zeros((0, 2), dtype=np.int64)
    if len(a):
        codes = np.unique(a.astype(np.int64) * n_runs + b)
        pairs = np.stack([codes // n_runs, codes % n_runs], axis=1)
    roots = merge_sets(n_runs, pairs)
    # Each root is the smallest run index of its set, hence its first cell in scan order.
    uniq, inverse = np.unique(roots, return_inverse=True)
    return inverse[run_id].astype(np.int32), len(uniq)


class RegionTable:
    """Per-region measures of a labelled board (arrays indexed by region id): `colour`,
    `area`, bounding box `top`, `left`, `bottom`, `right` (inclusive), centroid `cy`, `cx`."""

    def __init__(self, grid: np.ndarray, labels: np.ndarray, n: int) -> None:
        g = np.asarray(grid)
        flat = labels.ravel()
        h, w = labels.shape
        rows = np.repeat(np.arange(h), w)
        cols = np.tile(np.arange(w), h)
        self.n = n
        self.area = np.bincount(flat, minlength=n)
        first = np.full(n, flat.size, dtype=np.int64)
        np.minimum.at(first, flat, np.arange(flat.size))
        self.colour = g.ravel()[first].astype(np.int64)
        self.top = rows[first]
        self.bottom = np.zeros(n, dtype=np.int64)
        np.maximum.at(self.bottom, flat, rows)
        self.left = np.full(n, w, dtype=np.int64)
        np.minimum.at(self.left, flat, cols)
        self.right = np.zeros(n, dtype=np.int64)
        np.maximum.at(self.right, flat, cols)
        self.cy = np.bincount(flat, weights=rows, minlength=n) / np.maximum(self.area, 1)
        self.cx = np.bincount(flat, weights=cols, minlength=n) / np.maximum(self.area, 1)


def regions(grid: np.ndarray) -> tuple[np.ndarray, RegionTable]:
    """`label_regions` plus the measures of every region."""
    labels, n = label_regions(grid)
    return labels, RegionTable(grid, labels, n)
