"""The explorer's rank costs: which untried action of a state comes first.

Every step of the explorer (duck.explorer.policy) goes to the cheapest untried (state, action):
cost = shortest-path distance through the known graph + the action's rank cost, computed here
from what this game showed: a class of action (a key, or the colours and shape of a clicked
object) that never changed anything is pushed back and one that did pulled forward (an
animation that came back to the same state most); an action predicted to lead to a known
state, or a click tried often on this level, is pushed back; the winning path's click colours
are pulled forward on later levels; a click that changed nothing in `spot_dud` states of a
level, or whose twin was tried in this state (`twin_cost`), goes back. Each rule and the game
that asked for it: docs/explorer.md, "Inside".

RankCosts is mixed into Explorer: it reads the explorer's options and memory (graph, hud,
rng, keys_order, carried, win_cls, reversal, last_akey, death_lengths), set by Explorer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from duck.explorer.graph import DEAD, TIER_COST, Cand, Node, coarse
from duck.explorer.vision import Target, click_targets


class RankCosts:
    """The candidates of a state and their rank costs (see the module docstring)."""

    def _cands(self, node: Node, available: list[int]) -> list[Cand]:
        if node.cands is not None:
            return node.cands
        out = [Cand(a, 0.0, f"k{a}", a) for a in self.keys_order]
        if 7 in available:
            out.append(Cand(7, 4.0, "k7", 7))
        if 6 in available:
            targets: list[Target] = click_targets(node.grid, self.hud.mask)[: self.options.max_clicks]
            for t in targets:
                # a seed-dependent tie-break inside a tier, stable otherwise
                out.append(Cand((6, t.x, t.y), TIER_COST[t.tier] + self.rng.random() * 0.5,
                                t.cls, (t.cls, t.x, t.y)))
        node.cands = out
        return out

    def _class_stats(self, cls: str) -> tuple[int, int, int]:
        cur = self.graph.cls_stats.get(cls)
        old = self.carried.get(cls)
        return ((cur.tries if cur else 0) + (old.tries if old else 0),
                (cur.effects if cur else 0) + (old.effects if old else 0),
                (cur.tests if cur else 0) + (old.tests if old else 0))

    def _cost(self, cand: Cand) -> float:
        """Rank cost of an untried action: its tier, corrected by what its class did
        elsewhere (never anything: pushed back; changed the state: pulled forward; ran an
        animation that came back to the same state, a "test" such as a pour or a program
        run whose outcome depends on the state: pulled forward most), and by how often this
        very action (same object, same place) was already tried on this level."""
        o, c = self.options, cand.base
        tries, effects, tests = self._class_stats(cand.cls)
        if not tries:
            tries, effects, tests = self._class_stats(coarse(cand.cls))
        if coarse(cand.cls) in self.win_cls:
            c -= 2.0
        if tests and tests * 2 >= tries:
            c -= o.test_bonus
        elif tries:
            if effects == 0:
                c += (4.0 if isinstance(cand.akey, tuple) else o.key_dud) * min(tries, 3)
                if not isinstance(cand.akey, tuple) and o.key_give_up and tries >= o.key_give_up:
                    c += 8.0  # a key that never did anything anywhere goes behind every click
            else:
                c -= effects / tries
        n = self.graph.tried.get(cand.ident, 0)
        if n:
            w = o.novelty if isinstance(cand.akey, tuple) else o.key_novelty
            c += w * math.log2(1 + n)
            # this very object at this very place never did anything, in `spot_dud` states:
            # a fixed tile of a class whose other members respond (ft09) goes back
            if (o.spot_dud and n >= o.spot_dud and isinstance(cand.akey, tuple)
                    and not self.graph.worked.get(cand.ident)):
                c += 12.0
        return c

    def _best_untried(self, node: Node, available: list[int], dead_ok: bool,
                      here: bool = False, attempt: int = 0) -> tuple[float, Any] | None:
        """The cheapest untried action of a node reached at `attempt` actions into the
        current attempt. An action that ended in GAME_OVER counts as untried again when it
        would now come earlier in an attempt than when it died (a move budget, not the
        action, may have ended the game); with `dead_ok`, always, at a high cost."""
        o = self.options
        best: tuple[float, Any] | None = None  # (cost, action key)
        undo_again = (here and self.last_akey is not None and self.reversal.tries >= 2
                      and self.reversal.effects * 2 >= self.reversal.tries)
        for cand in self._cands(node, available):
            res = node.edges.get(cand.akey)
            if res is None:
                c = self._cost(cand)
                if undo_again and cand.akey == self.last_akey:
                    c += 3.0
                if o.twin_cost and isinstance(cand.akey, tuple):
                    # its twin was tried here: it would do the very same thing
                    tw = self.graph.twins.get(cand.ident)
                    if tw and not tw.isdisjoint(node.idents.values()):
                        c += o.twin_cost
                if o.known_penalty:
                    pk = self._predict(node, cand)
                    if pk and pk != node.key and pk in self.graph.nodes:
                        c += o.known_penalty
            elif (res == DEAD and attempt + 1 < node.dead_at.get(cand.akey, 0) - 1
                  and self._budget_death(node.dead_at[cand.akey])):
                c = self._cost(cand) + 2.0
            elif res == DEAD and dead_ok:
                c = self._cost(cand) + 20.0
            else:
                continue
            if best is None or c < best[0]:
                best = (c, cand.akey)
        return best

    def _predict(self, node: Node, cand: Cand) -> str:
        """The state this action would lead to if it changes the same pixels, from and to
        the same colours, as it last did elsewhere (a button that moves a piece, a tile
        that toggles); "" when its last change does not fit this board."""
        pk = node.pred.get(cand.akey)
        if pk is None:
            pk = ""
            dd = self.graph.diffs.get(cand.ident)
            if dd is not None and node.grid.shape == self.hud.mask.shape:
                idx, bv, av = dd
                if np.array_equal(node.grid.ravel()[idx], bv):
                    t = node.grid.copy()
                    t.ravel()[idx] = av
                    pk = self.hud.key(t)
            node.pred[cand.akey] = pk
        return pk

    def _budget_death(self, length: int) -> bool:
        """A GAME_OVER after `length` actions of an attempt looks like a move budget
        running out when another GAME_OVER came after the same number of actions."""
        return sum(1 for n in self.death_lengths if abs(n - length) <= 1) >= 2
