"""Object-centric play for keyboard games: walk the avatar to things that look like goals.

Once the keys are seen to move one object (duck.explorer.avatar), a state for walking is the
avatar's position on a lattice (its step) plus a key of the rest of the board (`world`: without
the avatar and the HUD, the same wherever the avatar stands). The navigator picks targets among
the board's objects (rare colours first, colours that completed a level first of all), plans a
path on the lattice (Dijkstra; a blocked move is a wall, not a new state), pushes boxes onto
pads (duck.explorer.push), with no target left walks to the nearest place never stood on, and
learns from every transition, whoever chose it. Colours, keys, boxes and the avatar carry over
to the next level. It hands the turn back to the graph search (duck.explorer) when nothing is
left to walk to, when it walks in circles (also where a timer changes the board at every step:
`loop`, told by `progress()`), or when the level's walking budget is spent. The targets, the
path costs and the circles in detail: docs/explorer.md, "Inside".
"""
from __future__ import annotations

import hashlib
import heapq
import math
from collections import Counter
from typing import Any

import numpy as np

from duck.explorer.avatar import Avatar, Motion, find_motions
from duck.explorer.push import plan_push, pushed_parts
from duck.game.regions import regions

BLOCKED = None
KEYS = (1, 2, 3, 4)


class Navigator:
    def __init__(self, budget: int = 300, max_nodes: int = 4000,
                 frontier: float | None = 6.0, space: bool = True,
                 loop: int | None = None) -> None:
        self.loop = loop  # a place chosen from more often than this, no new state since: a loop
        self.space = space  # try SPACE once where a target was touched
        self.frontier = frontier  # penalty of walking to a place never stood on (None: off)
        self.av = Avatar()
        self.floor: Counter = Counter()  # colour -> moves onto it
        self.wall: Counter = Counter()  # colour -> moves blocked by it
        self.deadly: set[int] = set()
        self.win_colours: Counter = Counter()
        self.box_kinds: set[tuple[int, int]] = set()  # (colour, area) of pushed objects
        self.space_off: list[tuple] = []  # (position, what SPACE changed) away from targets
        self.budget = budget
        self.level_budget = budget // 2  # level 1: half, until walking has proved itself
        self.max_nodes = max_nodes
        self.new_level()

    def new_level(self, won_last: bool | None = None) -> None:
        """Forget the level's places and touches. `won_last`: whether the navigator chose
        the move that completed the previous level; its budget on this level follows what
        walking has been worth so far (`budget` after a win, a quarter after a level the
        graph search completed), so a game it does not understand keeps most actions for
        the graph search."""
        if won_last is not None:
            self.level_budget = self.budget if won_last else self.budget // 4
        self.edges: dict[tuple, Any] = {}  # (world, pos, key) -> new pos or BLOCKED
        self.stuck: Counter = Counter()  # (pos, key) -> blocked moves, in any world
        self.limits: Counter = Counter()  # (key, coordinate along its axis) -> blocked
        # moves with no wall in sight: an invisible limit (a paddle's range, an edge)
        self.touched: Counter = Counter()  # target id -> touches on this level
        self.touched_world: dict[tuple, str] = {}  # target id -> world of its last touch
        self.bumped: set[tuple] = set()  # targets whose last touch was a blocked move
        self.goal: tuple | None = None  # the target key being walked to
        self._last: tuple | None = None  # (world, targets, target map) of the last plan
        self.used = 0  # actions chosen on this level
        self.idle_world: str | None = None  # the world in which nothing was left to walk to
        self.visits: Counter = Counter()  # (world, pos) -> times the navigator chose there
        self.hidden: tuple[int, int] | None = None  # where the avatar went out of sight
        self.pads: np.ndarray | None = None  # every pad seen on this level (boxes hide them)
        self.push_box: tuple[int, int] | None = None  # the box being pushed
        self.visited: set[tuple[int, int]] = set()  # positions stood on, in any world
        self.at_target = False  # the last move touched a target
        self.pressed: set[tuple] = set()  # (world, position) where SPACE was tried
        self.under: np.ndarray | None = None  # the board as last seen without the avatar
        self.since_new: Counter = Counter()  # position -> times chosen from since a new state

    def progress(self) -> None:
        """The graph search saw a new state (or sent a RESET): places may be worth passing
        again."""
        self.since_new.clear()

    def _remember(self, grid: np.ndarray, pos: tuple[int, int] | None) -> None:
        """Keep the board's pixels outside the avatar's box: what lies under the avatar
        once it has moved away, so the world key does not depend on where it stands."""
        if self.under is None or self.under.shape != grid.shape:
            self.under = np.full(grid.shape, -2, dtype=np.int8)
        keep = np.ones(grid.shape, dtype=bool)
        if pos is not None:
            h, w = self.av.size
            keep[max(0, pos[0]):pos[0] + h, max(0, pos[1]):pos[1] + w] = False
        self.under[keep] = grid[keep]

    # ------------------------------------------------------------------ perception
    def clean(self, grid: np.ndarray, pos: tuple[int, int] | None) -> np.ndarray:
        """The board without the avatar: its box shows what was last seen under it (-2
        where that is unknown)."""
        g = np.array(grid, dtype=np.int8, copy=True)
        if pos is not None:
            h, w = self.av.size
            sl = (slice(max(0, pos[0]), pos[0] + h), slice(max(0, pos[1]), pos[1] + w))
            g[sl] = self.under[sl] if self.under is not None and self.under.shape == g.shape else -2
        return g

    def world(self, clean: np.ndarray, mask: np.ndarray) -> str:
        """A key of the board without the avatar and the HUD: the same wherever it stands."""
        g = clean.copy()
        if g.shape == mask.shape:
            g[mask] = -1
        return hashlib.blake2b(g.tobytes(), digest_size=8).hexdigest()

    def _strip(self, clean: np.ndarray, p: tuple[int, int], q: tuple[int, int]) -> set[int] | None:
        """Colours the avatar's box sweeps going from `p` to `q` (Avatar.sweep) on a clean
        board, unknown pixels left out; None when `q` leaves the board."""
        r = self.av.sweep(p, q, clean.shape)
        return None if r is None else _colours(clean, r)

    def _is_wall(self, c: int) -> bool:
        return self.wall[c] > 0 and self.floor[c] == 0

    # ------------------------------------------------------------------ learning
    def observe(self, before: np.ndarray, after: np.ndarray, key: Any, marker: str | None,
                mask: np.ndarray) -> None:
        """Learn from one transition (every transition of the game, whoever chose it)."""
        if key == 5 and self.at_target:
            self.at_target = False  # the SPACE tried on a target: nothing to learn here
        elif key == 5 and before.shape == after.shape:
            # SPACE away from any target: a dud there makes it worth trying on targets
            # (bp01 activates towers only when standing on them); an effect there makes it
            # a general action (g50t), left to the graph search
            if len(self.space_off) < 8:  # judged later, with the HUD mask then known
                self.space_off.append((self.av.pos, before != after))
        if key not in KEYS or before.shape != after.shape:
            return
        self.at_target = False
        pos = self.av.locate(before) if self.av.known else None
        if pos is None and self.hidden is not None:
            pos = self.hidden
        m = self.av.pick(key, find_motions(before, after, mask), pos is not None)
        d = self.av.delta(key)
        self.av.learn(key, m)
        if pos is None or not self.av.known:
            return
        self.hidden = None
        if m is None and d is not None and self.av.locate(after) is None:
            # the avatar vanished: it stepped under something drawn over it (a ring, a pad)
            self.hidden = self.av.pos = (pos[0] + d[0], pos[1] + d[1])
            m = Motion(d[0], d[1], *self.hidden, 0, 0, ())
        self._remember(before, pos)
        clean = self.clean(before, pos)
        world = self.world(clean, mask)
        self._remember(after, self.av.pos if m is not None else pos)
        if m is not None:
            q = self.av.pos
            self.edges[(world, pos, key)] = q
            self.box_kinds |= pushed_parts(m.parts, self.av.parts)
            for c in self._strip(clean, pos, q) or ():
                self.floor[c] += 1
        elif d is not None:
            q = (pos[0] + d[0], pos[1] + d[1])
            if marker is None:
                self.edges[(world, pos, key)] = BLOCKED
                self.stuck[(pos, key)] += 1
                cols = self._strip(clean, pos, q)
                for c in cols or ():
                    if self.floor[c] == 0:
                        self.wall[c] += 1
                if cols is None or all(self.floor[c] > 0 for c in cols):
                    self.limits[(key, pos[0] if d[0] else pos[1])] += 1
        else:
            return
        if marker == "x":
            cols = self._strip(clean, pos, q) or set()
            if isinstance(self.goal, tuple) and self.goal[0] == "push" and d is not None:
                # the box was pushed onto something that ended the game: a decoy pad
                box = self.goal[1]
                cols = self._strip(clean, box, (box[0] + d[0], box[1] + d[1])) or set()
            self.deadly |= {c for c in cols if self.floor[c] <= 1 and not self._is_wall(c)}
        self.visited.add(pos)
        if m is not None:
            self.visited.add(q)
        self._touch(world, pos, q, blocked=m is None, won=marker == "+")

    def _touch(self, world: str, p: tuple[int, int], q: tuple[int, int], blocked: bool,
               won: bool) -> None:
        """Count the targets (of the last board planned on) that a move from `p` towards
        `q` swept over, whoever chose the move; the colours of a winning move's targets are
        remembered for the next levels."""
        if self._last is None or self._last[0] != world:
            return
        _, tg, tmap = self._last
        r = self.av.sweep(p, q, tmap.shape)
        if r is None:
            return
        hit = np.unique(tmap[r[0]:r[1], r[2]:r[3]])
        if (hit >= 0).any():
            self.at_target = True
        for i in hit[hit >= 0].tolist():
            key = self._key(tg[i], q)
            self.touched[key] += 1
            self.touched_world[key] = world
            if blocked:
                self.bumped.add(key)
            else:
                self.bumped.discard(key)
            if won:
                self.win_colours[tg[i][1][0]] += 1
        self.goal = None

    @staticmethod
    def _key(t: tuple, q: tuple[int, int]) -> tuple:
        """A small target is one goal; a large one (a row of markers, a pad) is one goal per
        lattice position on it, so that each of its cells gets visited."""
        return (t[1], q) if t[3] else t[1]

    def _done(self, key: tuple, world: str) -> bool:
        """Walked onto in this world (nothing more to learn there), or touched three times.
        A target that blocked the avatar stays open: another side may work (the blocked
        approach is known, so the path search takes another)."""
        n = self.touched[key]
        return n >= 3 or (n > 0 and self.touched_world.get(key) == world and key not in self.bumped)

    # ------------------------------------------------------------------ choosing
    def targets(self, grid: np.ndarray, mask: np.ndarray, world: str) -> list[tuple]:
        """(penalty, target id, pixel mask, large) of the objects worth walking to: not the
        avatar, the HUD, the background or huge areas, nor a colour that killed; not the
        floor (a colour walked on that covers a tenth of the board) nor a long wall (a
        small object of a wall colour, a door, is kept). Rare and distinct colours first,
        colours that completed a level first of all."""
        labels, t = regions(grid)
        H, W = grid.shape
        counts = np.bincount(grid.ravel().astype(np.int64) & 15, minlength=16)
        bg = int(np.argmax(counts))
        h, w = self.av.size
        skip = np.zeros(t.n, dtype=bool)
        pos = self.av.pos
        if pos is not None:
            skip[np.unique(labels[max(0, pos[0]):pos[0] + h, max(0, pos[1]):pos[1] + w])] = True
        if mask.shape == labels.shape and mask.any():
            skip[np.unique(labels[mask])] = True
        mine = {(c, a) for c, a, _, _ in self.av.parts}
        big = max(2 * h * w, 16)
        n_reg = np.bincount(t.colour & 15, minlength=16)
        present = sorted({int(c) for c in t.colour.tolist()}, key=lambda c: (counts[c], c))
        out = []
        for k in range(t.n):
            c, area = int(t.colour[k]), int(t.area[k])
            if skip[k] or c == bg or area > 0.25 * H * W or c in self.deadly or (c, area) in mine:
                continue
            if self.floor[c] > 0 and counts[c] >= 0.1 * H * W:
                continue  # the floor
            if self._is_wall(c) and (area > big or n_reg[c] > 2):
                continue  # walls
            tid = (c, int(t.top[k]), int(t.left[k]), int(t.bottom[k]), int(t.right[k]))
            large = area > h * w
            if not large and self._done(tid, world):
                continue
            pen = (2.0 * present.index(c) + 3.0 * math.log2(n_reg[c]) + 10.0 * self.touched[tid]
                   - 15.0 * min(self.win_colours[c], 1) + 5.0 * self._is_wall(c))
            out.append((pen, tid, labels == k, large))
        return out

    def choose(self, grid: np.ndarray, mask: np.ndarray, available: list[int],
               dead_keys: set[int] = frozenset()) -> int | None:
        """The next key towards the best target, or None (no avatar, no target, no path,
        or the level's budget spent)."""
        if not self.av.known or not self.av.regular() or self.used >= self.level_budget:
            return None
        pos = self.av.locate(grid) or self.hidden
        if pos is None:
            return None
        self.av.pos = pos
        self.visited.add(pos)
        self._remember(grid, pos)
        clean = self.clean(grid, pos)
        world = self.world(clean, mask)
        self.visits[(world, pos)] += 1
        if self.visits[(world, pos)] > 4:
            self.idle_world = world  # walking in circles (or ping-pong with the graph)
        if self.idle_world == world:
            return None  # nothing to walk to in this world: the graph's turn until it changes
        if self.loop is not None:
            self.since_new[pos] += 1
            if self.since_new[pos] > self.loop:
                return None  # circles in changing worlds: the graph's turn until a new state
        space_ok = self.space and bool(self.space_off) and not any(
            (d & ~mask).any() if d.shape == mask.shape else True for _, d in self.space_off)
        if self.at_target and space_ok and 5 in available and (world, pos) not in self.pressed:
            self.pressed.add((world, pos))  # on or against something: try SPACE once
            self.used += 1                  # (pick up, activate, hold: the keyboard "use")
            return 5
        deltas = {k: self.av.delta(k) for k in KEYS if k in available}
        deltas = {k: d for k, d in deltas.items() if d is not None and d != (0, 0)}
        best = None
        if len(deltas) >= 2:
            tg = self.targets(grid, mask, world)
            if self.box_kinds:
                best = plan_push(self, grid, clean, world, pos, deltas, tg, dead_keys)
            if tg and best is None:
                best = self._search(clean, world, pos, deltas, tg, dead_keys, explore=False)
            if best is None and self.frontier is not None:
                best = self._search(clean, world, pos, deltas, [], dead_keys, explore=True)
        if best is None:
            self.idle_world = world
            return None
        self.goal, key = best
        self.used += 1
        return key

    def _search(self, clean, world, pos, deltas, tg, dead_keys, explore: bool,
                avoid: np.ndarray | None = None) -> tuple | None:
        """Dijkstra on the lattice from `pos`; (target key, first key) of the cheapest target
        (path cost + its penalty). A target counts as reached when a move sweeps over one of
        its pixels; a move into a wall colour can touch but goes no further. With `explore`
        (no target left), the nearest place never stood on is the target: the frontier."""
        tmap = np.full(clean.shape, -1, dtype=np.int32)
        for i, t in enumerate(tg):
            tmap[t[2]] = i
        self._last = (world, tg, tmap)
        dist = {pos: 0.0}
        first: dict[tuple, int | None] = {pos: None}
        heap = [(0.0, pos)]
        best: tuple[float, int, int] | None = None
        min_pen = min([t[0] for t in tg] + ([self.frontier] if explore else []))
        expanded = 0
        while heap and expanded < self.max_nodes:
            dcur, p = heapq.heappop(heap)
            if dcur > dist.get(p, 1e9):
                continue
            if best is not None and dcur + 1.0 + min_pen >= best[0]:
                break
            expanded += 1
            for k, d in deltas.items():
                if p == pos and k in dead_keys:
                    continue
                known = self.edges.get((world, p, k), 0)
                if known is BLOCKED:
                    continue
                q = known if known != 0 else (p[0] + d[0], p[1] + d[1])
                # blocked here in another world, or at this line anywhere: probably again
                soft = 3.0 * bool(known == 0 and (self.stuck[(p, k)]
                                                  or self.limits[(k, p[0] if d[0] else p[1])]))
                r = self.av.sweep(p, q, clean.shape)
                if r is None or (avoid is not None and avoid[r[0]:r[1], r[2]:r[3]].any()):
                    continue
                cols = _colours(clean, r)
                if known == 0 and cols & self.deadly:
                    continue
                cost = soft + (1.0 if known != 0 or all(self.floor[c] > 0 for c in cols) else 1.5)
                nd = dcur + cost
                fk = k if p == pos else first[p]
                hit = np.unique(tmap[r[0]:r[1], r[2]:r[3]])
                for i in hit[hit >= 0].tolist():
                    key = self._key(tg[i], q)
                    if tg[i][3] and self._done(key, world):
                        continue
                    c = nd + tg[i][0] + 10.0 * self.touched[key] * tg[i][3]
                    if best is None or c < best[0]:
                        best = (c, key, fk)
                if known == 0 and any(self._is_wall(c) for c in cols):
                    continue  # touched, not entered
                if explore and known == 0 and q not in self.visited:
                    c = nd + self.frontier  # a place never stood on: explore it
                    if best is None or c < best[0]:
                        best = (c, ("frontier", q), fk)
                if nd < dist.get(q, 1e9):
                    dist[q] = nd
                    first[q] = fk
                    heapq.heappush(heap, (nd, q))
        return None if best is None else (best[1], best[2])


def _colours(clean: np.ndarray, r: tuple[int, int, int, int]) -> set[int]:
    """The colours of rows r[0]:r[1], columns r[2]:r[3] of a clean board, unknown (-2) left out."""
    cols = set(np.unique(clean[r[0]:r[1], r[2]:r[3]]).tolist())
    cols.discard(-2)
    return cols
