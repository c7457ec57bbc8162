"""Replay progress curves under a scheduling policy and a throughput model, in virtual time.

A simulated game follows a trajectory in generated tokens (devkit.simulator.trajectories: the
Duck's recorded runs; devkit.simulator.synthetic: the field's per-level medians); the server
model (devkit.simulator.throughput) turns tokens into seconds for the games holding a slot, so
a policy that keeps more games busy, or that wastes prefills, pays for it in time.

A game holding a slot loops over turns: at its model request it may trim its context (a yield
point, as the agent trims) or land a preemption; then it prefills (the whole context after a
trim or a resumption, the turn's new tokens otherwise), decodes the turn at the per-stream rate
of the moment, runs its tool call and reports actions and levels (a completed level is a yield
point too). The policy is asked at every yield point, end and start, at the `recheck` count and
at its `wake_at`; the slot rules are the runner's own (scheduler.book), and a stop ends a game on
the spot. At the scenario's end everything stops; a turn cut there counts for nothing. Scores
are percent, as the official score; the idle slot share is the slot-seconds no game held.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from scheduler.book import SlotBook
from scheduler.policy import GameState, Policy
from .throughput import Server
from .trajectories import Trajectory, score


@dataclass(frozen=True)
class Scenario:
    name: str
    budget_s: float  # seconds from the scheduler's start to the games' hard deadline
    slots: int = 10
    n_games: int = 110
    extend: bool = False  # extend the Duck's curves past their recorded end (hazard model)
    margin_s: float = 0.0  # the gate policies end everything this long before budget_s
    context_tokens: int = 131_072  # per game (the serving profile's plan)
    output_tokens: int = 12_288
    evict_to: float = 0.5  # a trim leaves this share of the context


SCENARIOS = {
    # A quick look: two hours, the Duck's curves not extended (a game whose recorded 45
    # minutes are used up is over).
    "30min": Scenario("30min", budget_s=2 * 3600.0),
    # The Kaggle run: 9 h less 12 min to a ready server (vLLM install ~80 s, Flash-Next boot
    # 530-615 s, the notebook) and the notebook's margin (kaggle.margin_s, 900 s): what the
    # runner gets as its budget.
    "kaggle": Scenario("kaggle", budget_s=9 * 3600.0 - 720.0 - 900.0, extend=True),
}


@dataclass
class Outcome:
    score: float  # mean game score over the set, percent
    levels: int  # levels completed over the set
    unplayed: int  # games never given a slot
    idle_slot_share: float
    tokens: int  # generated over the set
    yields: int
    preemptions: int
    last_end: float
    all_started_s: float  # when the last game got its first slot (inf: some never did)
    max_holding: int  # the most games that held a slot at once
    per_game_scores: list[float] = field(default_factory=list)


class _Game:
    __slots__ = ("traj", "st", "ctx", "turn", "trimmed", "prefill", "phase", "epoch", "yielded_at")

    def __init__(self, traj: Trajectory):
        self.traj, self.st = traj, GameState(traj.game_id, total_levels=len(traj.baselines))
        self.ctx = 0
        self.turn = None  # the turn being played (drawn at its request)
        self.trimmed = False  # the current turn's trim is done
        self.prefill = 0  # tokens to prefill before the next decode
        self.phase = "idle"  # idle | prefill | decode | tool
        self.epoch = 0  # invalidates heap entries of an ended phase
        self.yielded_at: float | None = None


def simulate(trajs: Sequence[Trajectory], policy: Policy, scenario: Scenario,
             server: Server | None = None) -> Outcome:
    """Run `policy` over one drawn set in virtual time (event-driven, processor sharing)."""
    return _Sim(trajs, policy, scenario, server or Server()).run()


class _Sim:
    """One simulated run: the slot book's games played through the server model.

    Time: `now`; `V`: tokens one stream has decoded since the start (all streams decode
    alike), so a decode ends at a fixed V whatever the number of streams does meanwhile.
    """

    def __init__(self, trajs: Sequence[Trajectory], policy: Policy, sc: Scenario, server: Server):
        self.sc, self.server, self.budget = sc, server, sc.budget_s
        self.trim_at = sc.context_tokens - sc.output_tokens
        self.trim_to = int(sc.evict_to * sc.context_tokens)
        self.games = {t.game_id: _Game(t) for t in trajs}
        self.book = SlotBook([g.st for g in self.games.values()], slots=sc.slots, budget_s=sc.budget_s,
                             policy=policy, on_stop=lambda gid, now: self.end(self.games[gid], now))
        self.now = self.V = 0.0
        self.decoding = 0
        self.dec_heap: list = []  # (V at which the turn's decode ends, seq, epoch, gid)
        self.busy_heap: list = []  # (time the prefill or tool call ends, seq, epoch, gid)
        self.seq = 0
        self.ready: deque[_Game] = deque()  # games at a model request
        self.consult = True
        self.idle = 0.0
        self.yields = self.preempts = 0

    def push(self, heap: list, key: float, g: _Game) -> None:
        self.seq += 1
        heapq.heappush(heap, (key, self.seq, g.epoch, g.st.game_id))

    # -- what a game does -----------------------------------------------------------------------
    def end(self, g: _Game, t: float) -> None:
        if g.phase == "decode":
            self.decoding -= 1
        self.book.end(g.st.game_id, t)
        g.epoch += 1
        g.phase = "idle"

    def give_up(self, g: _Game, reason: str) -> None:
        self.book.release(g.st.game_id, reason, self.now)
        g.yielded_at = self.now
        self.yields += 1
        self.preempts += reason == "preempted"
        self.consult = True

    def request(self, g: _Game) -> None:
        """The game is at a model request and holds a slot."""
        if g.turn is None:
            g.turn, g.trimmed = g.traj.next_turn(), False
            if g.turn is None:
                self.end(g, self.now)
                self.consult = True
                return
        if not g.trimmed and g.ctx > self.trim_at:
            g.ctx, g.trimmed, g.prefill = self.trim_to, True, self.trim_to
            self.give_up(g, "trim")
            return
        g.trimmed = True
        if g.st.preempt_requested:
            self.give_up(g, "preempted")
            return
        if g.prefill > 0:
            g.phase = "prefill"
            self.push(self.busy_heap, self.now + self.server.prefill_s(g.prefill), g)
            g.prefill = 0
        else:
            g.phase = "decode"
            self.decoding += 1
            self.push(self.dec_heap, self.V + g.turn[0], g)

    def decide(self) -> None:
        """The book asks the policy; a granted game comes to its model request."""
        now = self.now
        for gid, kind in self.book.decide(now):
            g = self.games[gid]
            if kind == "start":
                g.ctx, g.prefill = self.server.first_prompt_tokens, self.server.first_prompt_tokens
            elif g.yielded_at is not None and g.yielded_at < now:  # its cached prefix is gone
                g.prefill = max(g.prefill, g.ctx)
            self.ready.append(g)

    # -- events ---------------------------------------------------------------------------------
    def decoded(self, g: _Game) -> None:
        self.decoding -= 1
        g.st.progress(levels=g.st.levels, actions=g.st.actions, tokens=g.st.tokens + g.turn[0])
        due = self.book.recheck.get(g.st.game_id)
        if due is not None and g.st.tokens >= due:
            self.consult = True
        g.phase = "tool"
        g.epoch += 1
        self.push(self.busy_heap, self.now + self.server.tool_s + self.server.prefill_s(g.turn[1] - g.turn[0]), g)

    def busy_over(self, g: _Game) -> None:
        g.epoch += 1
        if g.phase == "prefill":
            g.phase = "decode"
            self.decoding += 1
            self.push(self.dec_heap, self.V + g.turn[0], g)
            return
        # The tool call is over: the turn's actions and levels are in.
        gen, growth, actions, levels = g.turn
        g.turn, g.ctx, g.phase = None, g.ctx + growth, "idle"
        first = g.st.actions == 0 and actions > 0
        levelled = g.st.progress(levels=levels, actions=actions, tokens=g.st.tokens)
        if first and self.book.recheck.get(g.st.game_id) is not None:
            self.consult = True
        if levels >= len(g.traj.baselines):
            self.end(g, self.now)
            self.consult = True
        elif levelled:
            self.give_up(g, "level")
        else:
            self.ready.append(g)

    def _top(self, heap: list) -> float | None:
        while heap and heap[0][2] != self.games[heap[0][3]].epoch:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def step(self) -> bool:
        """Settle what happens at `now`, then go to the next event; False at the end."""
        while True:
            while self.ready:
                g = self.ready.popleft()
                if g.st.status == "running":
                    self.request(g)
            if not self.consult:
                break
            self.consult = False
            self.decide()
        rate = self.server.per_stream(self.decoding)
        dec, busy = self._top(self.dec_heap), self._top(self.busy_heap)
        t_dec = self.now + (dec - self.V) / rate if dec is not None and rate > 0 else math.inf
        t_busy = busy if busy is not None else math.inf
        t_dead = self.book.next_deadline()
        wake_at = self.book.wake_at
        t_wake = wake_at if wake_at is not None and wake_at > self.now else math.inf
        t = min(t_dec, t_busy, t_dead, t_wake, self.budget)
        self.idle += (self.sc.slots - self.book.held) * (t - self.now)
        self.V += rate * (t - self.now)
        self.now = t
        if self.now >= self.budget:
            for g in self.games.values():
                if g.st.status in ("running", "waiting"):
                    self.end(g, self.budget)
            return False
        if t == t_dec:
            self.decoded(self.games[heapq.heappop(self.dec_heap)[3]])
        elif t == t_busy:
            self.busy_over(self.games[heapq.heappop(self.busy_heap)[3]])
        elif t == t_dead:
            self.book.overdue(self.now)
            self.consult = True
        else:  # the policy's wake_at
            self.consult = True
        return True

    def run(self) -> Outcome:
        for _ in range(10_000_000):
            if not self.step():
                break
        else:
            raise RuntimeError("simulation did not converge")
        games, order = self.games.values(), self.book.order
        scores = [score(g.traj, g.st.levels) for g in games]
        span = self.sc.slots * max(self.now, 1e-9)
        return Outcome(
            score=float(np.mean(scores)),
            levels=sum(g.st.levels for g in games),
            unplayed=sum(1 for s in order if s.started_at is None),
            idle_slot_share=self.idle / span,
            tokens=sum(s.tokens for s in order),
            yields=self.yields,
            preemptions=self.preempts,
            last_end=self.book.last_end,
            all_started_s=max((s.started_at if s.started_at is not None else math.inf) for s in order),
            max_holding=self.book.max_held,
            per_game_scores=scores,
        )


def mean_ci(xs: Sequence[float], digits: int = 4) -> dict:
    """Mean and normal 95% confidence interval of the mean over seeds."""
    a = np.asarray(xs, dtype=float)
    half = 1.96 * a.std(ddof=1) / math.sqrt(len(a)) if len(a) > 1 else 0.0
    m = float(a.mean())
    return {"mean": round(m, digits), "ci95": [round(float(m - half), digits), round(float(m + half), digits)]}


def summarize(outcomes: Sequence[Outcome], scenario: Scenario) -> dict:
    return {
        "expected_score": mean_ci([o.score for o in outcomes]),
        "expected_levels": mean_ci([o.levels for o in outcomes], 2),
        "idle_slot_share": mean_ci([o.idle_slot_share for o in outcomes]),
        "unplayed_games": mean_ci([o.unplayed for o in outcomes], 2),
        "tokens_per_game": round(float(np.mean([o.tokens for o in outcomes])) / scenario.n_games),
        "yields_per_game": round(float(np.mean([o.yields for o in outcomes])) / scenario.n_games, 2),
        "preemptions_per_game": round(float(np.mean([o.preemptions for o in outcomes])) / scenario.n_games, 2),
        "all_started_seconds_max": round(float(np.max([o.all_started_s for o in outcomes])), 1),
        "last_end_seconds_max": round(float(np.max([o.last_end for o in outcomes])), 1),
        "deadline_seconds": scenario.budget_s,
    }


def paired(a: Sequence[Outcome], b: Sequence[Outcome]) -> dict:
    """a - b seed by seed (same draws), with the 95% CI of the mean difference."""
    return {
        "score": mean_ci([x.score - y.score for x, y in zip(a, b)]),
        "levels": mean_ci([x.levels - y.levels for x, y in zip(a, b)], 2),
        "seeds_a_better": int(sum(x.score > y.score for x, y in zip(a, b))),
        "seeds": len(a),
    }
