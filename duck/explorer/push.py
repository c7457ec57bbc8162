"""Pushing boxes onto pads, for keyboard games where walking into an object moves it.

A box is an object that moved with the avatar when the avatar walked into it (`pushed_parts`);
a pad is one of the navigator's targets that is not a box. `push_step` plans a box path on the
lattice by breadth-first search (a push needs the cell behind the box and the cell ahead free)
and returns its first push: the key and the cell the avatar must stand on. One box at a time:
it solves the one- and two-box rooms of the community games, not real Sokoban.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import numpy as np

from duck.game.regions import regions

Pos = tuple[int, int]


def pushed_parts(motion_parts: tuple, avatar_parts: tuple) -> set[tuple[int, int]]:
    """(colour, area) of the regions that moved with the avatar but are not part of it."""
    mine = {(c, a) for c, a, _, _ in avatar_parts}
    return {(c, a) for c, a, _, _ in motion_parts if (c, a) not in mine}


def push_step(boxes: list[Pos], on_pad: Callable[[Pos], bool],
              free: Callable[[Pos, Pos], bool], deltas: dict[int, Pos],
              banned: set[tuple[Pos, int]] = frozenset(), prefer: Pos | None = None,
              limit: int = 400) -> tuple[int, Pos, Pos] | None:
    """(key, cell behind the box, box) of the first push of the shortest box path from a
    box not on a pad to a pad, or None. `free(q, box)`: a box or the avatar may stand at
    q while `box` is being moved (it no longer blocks its own old place). `banned`: pushes
    (box position, key) already seen to fail. `prefer`: the box being worked on; it keeps
    the turn while it has a path (two boxes replanned from scratch at every step push each
    other back and forth)."""
    best: tuple[int, int, Pos, Pos] | None = None
    for box in sorted(boxes, key=lambda b: b != prefer):
        if on_pad(box):
            continue
        prev: dict[Pos, tuple[Pos, int] | None] = {box: None}
        queue = deque([box])
        found = None
        while queue and len(prev) < limit:
            b = queue.popleft()
            if b != box and on_pad(b):
                found = b
                break
            for k, (dy, dx) in deltas.items():
                ahead, behind = (b[0] + dy, b[1] + dx), (b[0] - dy, b[1] - dx)
                if (ahead in prev or (b, k) in banned or not free(ahead, box)
                        or not free(behind, box)):
                    continue
                prev[ahead] = (b, k)
                queue.append(ahead)
        if found is None:
            continue
        steps, b = 0, found
        while prev[b][0] != box:
            b = prev[b][0]
            steps += 1
        k = prev[b][1]
        dy, dx = deltas[k]
        cand = (steps, k, (box[0] - dy, box[1] - dx), box)
        if box == prefer:
            return cand[1], cand[2], cand[3]
        if best is None or cand[:2] < best[:2]:
            best = cand
    return None if best is None else (best[1], best[2], best[3])


def blocked_pushes(edges: dict, world: str, deltas: dict[int, Pos]) -> set[tuple[Pos, int]]:
    """(box position, key) of the pushes seen blocked in this world: `edges` maps (world,
    avatar position, key) to the new position or None (blocked). A key the avatar model no
    longer gives a move (its delta went unknown) is left out: no push plans with it."""
    return {((behind[0] + deltas[k][0], behind[1] + deltas[k][1]), k)
            for (wd, behind, k), res in edges.items()
            if wd == world and res is None and k in deltas}


def plan_push(nav: Any, grid: np.ndarray, clean: np.ndarray, world: str, pos: Pos,
              deltas: dict[int, Pos], tg: list[tuple], dead_keys: set[int]) -> tuple | None:
    """(goal, key) of the next step of pushing a box onto a pad for the navigator `nav`
    (duck.explorer.nav.Navigator): the push itself when the avatar stands behind the box,
    else the first step of a walk there that goes around the box. Pads seen on the level
    are remembered (a box on a pad hides it); a push that was blocked in this world is not
    planned again."""
    _, t = regions(grid)
    h, w = nav.av.size
    boxes = [(int(t.top[k]), int(t.left[k])) for k in range(t.n)
             if (int(t.colour[k]), int(t.area[k])) in nav.box_kinds]
    pads = [x for x in tg if (x[1][0], int(x[2].sum())) not in nav.box_kinds]
    if not boxes or not pads:
        return None
    for x in pads:
        nav.pads = x[2] if nav.pads is None else (nav.pads | x[2])
    box_mask = np.zeros(grid.shape, dtype=bool)
    for b in boxes:
        box_mask[b[0]:b[0] + h, b[1]:b[1] + w] = True
    bad = [c for c in range(16) if nav._is_wall(c) or c in nav.deadly]
    obst = np.isin(clean, bad) | box_mask
    H, W = grid.shape

    def inside(q: Pos) -> bool:
        return 0 <= q[0] and 0 <= q[1] and q[0] + h <= H and q[1] + w <= W

    def free(q: Pos, box: Pos) -> bool:
        if not inside(q):
            return False
        o = obst[q[0]:q[0] + h, q[1]:q[1] + w].copy()
        oy, ox = box[0] - q[0], box[1] - q[1]
        o[max(0, oy):max(0, oy + h), max(0, ox):max(0, ox + w)] = False
        return not o.any()

    def on_pad(q: Pos) -> bool:
        return inside(q) and bool(nav.pads[q[0]:q[0] + h, q[1]:q[1] + w].any())

    step = push_step(boxes, on_pad, free, deltas, blocked_pushes(nav.edges, world, deltas),
                     nav.push_box)
    if step is None:
        return None
    key, behind, box = step
    dy, dx = deltas[key]
    nav.push_box = (box[0] + dy, box[1] + dx) if behind == pos else box
    if behind == pos:
        return ("push", box), key
    cell = np.zeros(grid.shape, dtype=bool)
    cell[behind[0]:behind[0] + h, behind[1]:behind[1] + w] = True
    return nav._search(clean, world, pos, deltas, [(0.0, ("walk", behind), cell, False)],
                       dead_keys, explore=False, avoid=box_mask)
