"""The explorer's memory of one level: states, transitions, effect statistics.

A state is a board with its HUD masked (duck.explorer.vision.HudTracker.key). The graph
keeps every transition of the level in a log, so that it can be rebuilt when the HUD mask
grows (two states that differed only in a counter then become one). Edges map an action
key (1..5, 7, or (6, x, y) for a click) to the resulting state key, or to a marker: SAME
(nothing changed outside the HUD), DEAD (GAME_OVER) or LEVEL (the level was completed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duck.explorer.vision import HudTracker
from duck.game.actions import RESET, Action

SAME = "="  # the action changed nothing outside the HUD
DEAD = "x"  # the action ended in GAME_OVER
LEVEL = "+"  # the action completed the level

TIER_COST = (0.0, 3.0, 6.0, 10.0)  # rank cost of click tiers 0..3 (keyboard actions cost 0)
# An action that comes back to the same state after this many distinct boards ran a
# simulation (a pour, a program run) rather than a blink of "nothing happened" feedback
# (lf52, ft09 flash 2-3 alternating boards on a useless click).
TEST_FRAMES = 4


@dataclass
class Stats:
    tries: int = 0
    effects: int = 0
    tests: int = 0  # tries that animated (a run of distinct boards) but left the state as it was


@dataclass
class Cand:
    akey: Any  # 1..5, 7, or (6, x, y)
    base: float  # rank cost from the action's kind and tier
    cls: str  # effect-statistics class: "k<id>" or the clicked object's colours + shape
    ident: Any  # identity across states, for novelty: the key id, or (cls, x, y)


@dataclass
class Node:
    key: str
    grid: np.ndarray
    cands: list[Cand] | None = None
    edges: dict[Any, str] = field(default_factory=dict)  # action key -> result key or marker
    dead_at: dict[Any, int] = field(default_factory=dict)  # action key -> shortest attempt
    # length (actions since the level's start or last RESET) at which it ended in GAME_OVER
    pred: dict[Any, str] = field(default_factory=dict)  # action key -> predicted result key
    idents: dict[Any, Any] = field(default_factory=dict)  # tried action key -> its identity


@dataclass
class Transition:
    before: np.ndarray
    akey: Any
    after: np.ndarray
    marker: str | None  # DEAD / LEVEL, or None for an ordinary result
    cls: str = ""
    ident: Any = None
    attempt: int = 0  # actions since the level's start or the last RESET, this one included
    frames: int = 1  # distinct boards in the animation


class LevelGraph:
    """The known states and transitions of one level, rebuilt when the HUD mask changes.
    Also the level's effect statistics per class, and tries and effective tries per
    action identity."""

    def __init__(self, level: int, start: np.ndarray, hud: HudTracker) -> None:
        self.level = level
        self.start_grid = start
        self.log: list[Transition] = []
        self.rebuild(hud)

    def path_classes(self, to: str) -> list[str]:
        """The classes of the actions on a shortest known path from the level's start to
        state `to` (breadth-first over the edges that changed the state)."""
        prev: dict[str, tuple[str, Any] | None] = {self.start: None}
        layer = [self.start]
        while layer and to not in prev:
            nxt = []
            for k in layer:
                n = self.nodes.get(k)
                for akey, res in (n.edges.items() if n else ()):
                    if res in (SAME, DEAD, LEVEL) or res in prev:
                        continue
                    prev[res] = (k, akey)
                    nxt.append(res)
            layer = nxt
        out: list[str] = []
        k = to
        while prev.get(k) is not None:
            pk, akey = prev[k]
            out.append(self.edge_cls.get((pk, akey), ""))
            k = pk
        return out[::-1]

    def rebuild(self, hud: HudTracker) -> None:
        """Everything but the log, from the log, under the HUD mask `hud` has now."""
        self.nodes: dict[str, Node] = {}
        self.cls_stats: dict[str, Stats] = {}
        self.tried: dict[Any, int] = {}
        self.worked: dict[Any, int] = {}  # action identity -> tries that changed the state
        # or ran a test
        # action identity -> the last change it made: flat pixel indices, before, after
        self.diffs: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.edge_cls: dict[tuple[str, Any], str] = {}  # (state key, action key) -> class
        # click identity -> the clicks that led to the same new state as it did from one
        # state and never to different results (two parts of one button)
        self.twins: dict[Any, set] = {}
        self.not_twins: set[frozenset] = set()
        self.start = self.node(self.start_grid, hud).key
        for t in self.log:
            self._add(t, hud)

    def node(self, grid: np.ndarray, hud: HudTracker) -> Node:
        key = hud.key(grid)
        n = self.nodes.get(key)
        if n is None:
            n = self.nodes[key] = Node(key, grid)
        return n

    def add(self, t: Transition, hud: HudTracker) -> tuple[Node, Node]:
        self.log.append(t)
        return self._add(t, hud)

    def _add(self, t: Transition, hud: HudTracker) -> tuple[Node, Node]:
        a = self.node(t.before, hud)
        b = self.node(t.after, hud)
        if t.akey == "R":
            if t.marker is None:
                self.start = b.key  # what a RESET really leads to (lives shown, etc.)
            return a, b
        res = t.marker if t.marker is not None else (SAME if a.key == b.key else b.key)
        if res == DEAD:
            a.dead_at[t.akey] = min(a.dead_at.get(t.akey, t.attempt), t.attempt)
        if t.akey not in a.edges:
            for c in {t.cls, coarse(t.cls)}:
                st = self.cls_stats.setdefault(c, Stats())
                st.tries += 1
                st.effects += int(res != SAME)
                st.tests += int(res == SAME and t.frames >= TEST_FRAMES)
        if isinstance(t.akey, tuple) and t.akey not in a.edges:
            self._pair(a, t.ident, res)
        a.edges[t.akey] = res
        a.idents[t.akey] = t.ident
        self.edge_cls[(a.key, t.akey)] = t.cls
        self.tried[t.ident] = self.tried.get(t.ident, 0) + 1
        if res != SAME or t.frames >= TEST_FRAMES:  # a test (a run, a pour) did something
            self.worked[t.ident] = self.worked.get(t.ident, 0) + 1
        if t.marker is None and res != SAME and t.before.shape == t.after.shape:
            d = (t.before != t.after) & ~hud.mask if t.before.shape == hud.mask.shape \
                else t.before != t.after
            idx = np.flatnonzero(d)
            self.diffs[t.ident] = (idx, t.before.ravel()[idx], t.after.ravel()[idx])
        return a, b

    def _pair(self, a: Node, ident: Any, res: str) -> None:
        """Compare a click's result with the other clicks tried in the same state: the same
        new state makes them twins, a different result (anywhere, ever) parts them."""
        for akey, other in a.edges.items():
            twin = a.idents.get(akey)
            pair = frozenset((ident, twin))
            if not isinstance(akey, tuple) or len(pair) < 2 or pair in self.not_twins:
                continue
            if other != res:
                self.not_twins.add(pair)
                self.twins.get(ident, set()).discard(twin)
                self.twins.get(twin, set()).discard(ident)
            elif res not in (SAME, DEAD):
                self.twins.setdefault(ident, set()).add(twin)
                self.twins.setdefault(twin, set()).add(ident)


def distinct(frames: list[np.ndarray]) -> int:
    """How many different boards an animation shows."""
    return len({f.tobytes() for f in frames})


def coarse(cls: str) -> str:
    """The colours-only class of a click class (shapes change between levels)."""
    return cls.split(":", 1)[0] + ":*" if ":" in cls else cls


def action_of(akey: Any) -> Action:
    if akey == "R":
        return RESET
    if isinstance(akey, tuple):
        return Action.click(akey[1], akey[2])
    return Action(akey)
