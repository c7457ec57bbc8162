"""The explorer: a non-LLM policy, the embedded default and the model-driven agent's fallback.

It explores a graph of states, one graph per level (duck.explorer.graph): a state is the board
with its HUD masked (duck.explorer.vision.HudTracker), and every step goes to the cheapest
untried (state, action), the shortest-path distance through the known graph plus the action's
rank cost (duck.explorer.rank). In keyboard games whose keys move one object
(duck.explorer.avatar), the navigator (duck.explorer.nav) walks it to goal-like objects and
pushes boxes onto pads (duck.explorer.push); the graph search takes the turn back for a
promising non-move action right here, or when the navigator walks in circles or spends its
budget. Once transitions show a mark drawn around the last click (duck.explorer.feedback), it
plays on a view of the board without it. RESET is sent after GAME_OVER or as the shortest route
to an untried action, never as a level's first action nor twice in a row (both would restart
the whole game outside competition mode). Deterministic for a seed. The rules in detail:
docs/explorer.md, "Inside"; `duck bench explorer` measures it on a games folder over seeds.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from duck.config import ExplorerConfig, validate
from duck.explorer.graph import (DEAD, LEVEL, SAME, LevelGraph, Node, Stats,
                                 Transition, action_of, coarse, distinct)
from duck.explorer.feedback import ClickFeedback
from duck.explorer.nav import KEYS, Navigator
from duck.explorer.rank import RankCosts
from duck.explorer.vision import HudTracker
from duck.play.session import Session, game_seed

log = logging.getLogger(__name__)


class Explorer(RankCosts):
    """See the module docstring. Its options are the config's `explorer` section
    (duck.config.ExplorerConfig, where each is described): `config`, or the section's fields
    as keywords (`Explorer(seed, nav=False)`), or both (the keywords win); an unknown or bad
    option is a ConfigError, said in one line."""

    name = "explorer"
    yields_in_step = True  # acts from its own thread: its slot yield points are in Session.step

    def __init__(self, seed: int = 0, config: ExplorerConfig | None = None, **options: Any) -> None:
        self.seed = seed
        self.options = validate(ExplorerConfig, {**(config.model_dump() if config is not None else {}), **options})

    # ------------------------------------------------------------------ setup per game
    def _init(self, session: Session) -> None:
        self.rng = random.Random(game_seed(self.seed, session.game.game_id))
        obs = session.obs
        self.hud = HudTracker(obs.grid.shape)
        self.feedback = ClickFeedback()
        self.grid = self.feedback.view(obs.grid)  # the board as the explorer sees it
        self.keys_order = [a for a in (1, 2, 3, 4, 5) if a in obs.available_actions]
        self.rng.shuffle(self.keys_order)
        self.carried: dict[str, Stats] = {}  # class statistics of the levels before
        self.reversal = Stats()  # how often repeating an effective action undid it
        self.win_cls: set[str] = set()  # coarse classes of the clicks on a level's winning path
        self.graph = LevelGraph(obs.levels_completed, self.grid, self.hud)
        self.last_akey: Any = None
        self.prev_key: str | None = None  # state before the last effective action
        self._why: Any = None
        self._res: str | None = None
        self.attempt = 0  # actions since the level's start or the last RESET
        self.death_lengths: list[int] = []  # attempt lengths at each GAME_OVER
        # a click changed something: the game is played with the mouse (keys move a
        # cursor or a piece for it), and walking to goal-like objects is not the point
        self.clicks_matter = False
        self.clicked = False
        keyboard = any(k in obs.available_actions for k in KEYS)
        o = self.options
        self.nav = (Navigator(o.nav_budget, frontier=o.nav_frontier, space=o.nav_space, loop=o.nav_loop)
                    if o.nav and keyboard else None)

    def _new_level(self, obs: Any) -> None:
        for cls, st in self.graph.cls_stats.items():  # mechanics carry over, but weaker
            old = self.carried.setdefault(cls, Stats())
            old.tries += st.tries
            old.effects += st.effects
            old.tests += st.tests
        for st in self.carried.values():
            st.tries, st.effects, st.tests = ((st.tries + 1) // 2, (st.effects + 1) // 2,
                                              (st.tests + 1) // 2)
        self.graph = LevelGraph(obs.levels_completed, self.grid, self.hud)
        self.last_akey = None
        self.prev_key = None
        self.attempt = 0
        if self.nav is not None:
            self.nav.new_level(won_last=self._why == "nav")

    # ------------------------------------------------------------------ planning
    def _plan(self, cur: Node, available: list[int], reset_ok: bool, dead_ok: bool) -> Any | None:
        """First action of the path to the cheapest untried action: BFS by layers through
        the known graph (a RESET joins the level's start at distance 1), stopping once the
        distance alone exceeds the best cost found."""
        g = self.graph
        best: tuple[float, Any] | None = None
        first: dict[str, Any] = {cur.key: None}
        layer = [cur.key]
        d = 0
        while layer:
            if best is not None and d >= best[0]:
                break
            nxt: list[str] = []
            for k in layer:
                n = g.nodes[k]
                attempt = d - 1 if first[k] == "R" else self.attempt + d
                u = self._best_untried(n, available, dead_ok, k == cur.key, attempt)
                if u is not None:
                    c = d + u[0]
                    if best is None or c < best[0]:
                        best = (c, u[1] if first[k] is None else first[k])
                        self._why = (d, round(u[0], 2), str(u[1]))
                for akey, res in n.edges.items():
                    if res in (SAME, DEAD, LEVEL) or res in first or res not in g.nodes:
                        continue
                    first[res] = akey if first[k] is None else first[k]
                    nxt.append(res)
            if d == 0 and reset_ok and g.start not in first and g.start in g.nodes:
                first[g.start] = "R"
                nxt.append(g.start)
            layer = nxt
            d += 1
        return None if best is None else best[1]

    # ------------------------------------------------------------------ the loop
    def play(self, session: Session) -> None:
        self._init(session)
        level_start_actions = session.game.actions
        last_was_reset = False
        while True:
            obs = session.obs
            if obs.state == "WIN":
                return
            if obs.levels_completed != self.graph.level:
                self._new_level(obs)
                level_start_actions = session.game.actions
            cap = self.options.level_cap
            if cap is not None and session.game.actions - level_start_actions >= cap:
                session.event("explorer", f"level cap {cap} reached; giving up")
                return
            reset_ok = session.game.level_actions > 0 and not last_was_reset
            if obs.state == "GAME_OVER":
                if not reset_ok:
                    return
                akey = "R"
            else:
                cur = self.graph.node(self.grid, self.hud)
                akey = self._plan(cur, obs.available_actions, reset_ok, dead_ok=False)
                mouse = 6 in obs.available_actions and not self.clicked  # probe the mouse first
                if (self.nav is not None and not mouse and not self.clicks_matter
                        and not self._cheap_here(akey)):
                    dead = {k for k, r in cur.edges.items() if r == DEAD and k in KEYS}
                    nk = self.nav.choose(self.grid, self.hud.mask, obs.available_actions, dead)
                    if nk is not None:
                        akey, self._why = nk, "nav"
                if akey is None:
                    akey = self._plan(cur, obs.available_actions, reset_ok, dead_ok=True)
                if akey is None:
                    akey = self._fallback(obs)
                    self._why = "fallback"
            self._step(session, akey)
            last_was_reset = akey == "R"

    def _cheap_here(self, akey: Any) -> bool:
        """The graph search's choice is a promising action of this very state that is not
        a move (an untried SPACE, a click of a class that did something): it goes before
        walking, so that what the avatar can do is tried where it stands."""
        if akey is None or akey == "R" or akey in KEYS or not isinstance(self._why, tuple):
            return False
        dist, cost, _ = self._why
        return dist == 0 and cost <= self.options.nav_yield

    def _fallback(self, obs: Any) -> Any:
        """Everything known is tried: a seeded random action (a click anywhere)."""
        ids = [a for a in obs.available_actions if a != 0] or [1]
        a = self.rng.choice(ids)
        return (6, self.rng.randrange(64), self.rng.randrange(64)) if a == 6 else a

    def _step(self, session: Session, akey: Any) -> None:
        before = session.obs
        info = None
        if self.options.trace:
            info = {"why": self._why, "nodes": len(self.graph.nodes), "prev": self._res}
        after = session.step(action_of(akey), info=info)
        if after is before:
            return  # refused (a RESET the Session judged unsafe) or not sent
        marker = None
        if after.levels_completed != before.levels_completed or after.state == "WIN":
            marker = LEVEL
        elif after.state == "GAME_OVER":
            marker = DEAD
        found = self.options.feedback and self.feedback.observe(
            before.grid, akey, after.grid, self.hud.mask, ordinary=marker is None and akey != "R")
        g0, g1 = self.grid, self.feedback.view(after.grid)
        self.grid = g1
        if akey != "R":
            self.attempt += 1  # (before the early return below: the revealing click counts)
        if found:  # the graph so far took the click mark for states: start the level over
            session.event("explorer", "click feedback found: the mark drawn around the last "
                          "click is left out of states")
            self.graph = LevelGraph(self.graph.level, self.graph.start_grid, self.hud)
            self.clicks_matter = False
            self.last_akey = self.prev_key = None
            return
        if akey == "R":
            self.graph.add(Transition(g0, "R", g1, None), self.hud)
            self.attempt = 0
            if self.nav is not None:
                self.nav.progress()  # walking the known way again after a RESET is no loop
            self.last_akey = None
            self._res = "reset"
            return
        node = self.graph.node(g0, self.hud)
        cand = next((c for c in node.cands or () if c.akey == akey), None)
        if cand is not None:
            cls, ident = cand.cls, cand.ident
        else:  # a fallback action
            cls, ident = (f"k{akey}" if not isinstance(akey, tuple) else "?"), akey
        if self.hud.observe(g0, g1):
            self.graph.rebuild(self.hud)
        if marker == DEAD:
            self.death_lengths.append(self.attempt)
        if self.nav is not None:
            self.nav.observe(g0, g1, akey, marker, self.hud.mask)
        known = self.hud.key(g1) in self.graph.nodes
        a, b = self.graph.add(Transition(g0, akey, g1, marker, cls, ident,
                                         self.attempt, distinct(after.frames)), self.hud)
        effect = marker is not None or a.key != b.key
        if isinstance(akey, tuple):
            self.clicked = True
            self.clicks_matter |= effect
        if marker == LEVEL:  # every click class on the way to the win, not only the last
            for c in self.graph.path_classes(a.key) + [cls]:
                if ":" in c:
                    self.win_cls.add(coarse(c))
        self._res = "same" if not effect else ("known" if known else "new")
        if self.nav is not None and (self._res == "new" or marker is not None):
            self.nav.progress()
        if effect and akey == self.last_akey and self.prev_key is not None:
            self.reversal.tries += 1
            self.reversal.effects += int(b.key == self.prev_key)
        if effect:
            self.prev_key = a.key
        self.last_akey = akey if effect else None
