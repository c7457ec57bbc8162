"""Replay progress curves under a scheduling policy and a throughput model, in virtual time.

Why: the only honest way to compare schedules before spending a Kaggle run. A simulated game
follows a trajectory in generated tokens (scheduler.trajectories: the Duck's recorded runs;
scheduler.synthetic: the field's per-level medians and hazards); the server model
(scheduler.throughput) turns tokens into seconds for the games holding a slot, so a policy
that keeps more games busy, or that wastes prefills, pays for it in time.

A game holding a slot loops over turns: at its model request it may trim its context (a
yield point, when the context passes `context_tokens - output_tokens`: back to
`evict_to * context_tokens`, as the agent does) or land a preemption; then it prefills (the
whole context after a trim or a resumption, the turn's new tokens otherwise), decodes the
turn's tokens at the per-stream rate of the moment, runs its tool call, and reports actions
and levels; a completed level is a yield point too. The policy is asked at every yield point,
end and start, when a running game's tokens reach the `recheck` count the policy gave, and at
its `wake_at`. At the scenario's end everything stops; a turn cut there counts for nothing.

Scores are percent (the official per-level score from the actions spent on each level and its
human baseline, weighted by level). The idle slot share is the share of slot-seconds up to the
end that no game held.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .policy import GameState, Policy
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
    __slots__ = ("traj", "st", "ctx", "turn", "trimmed", "prefill", "phase", "epoch", "deadline",
                 "yielded_at", "levels_seen")

    def __init__(self, traj: Trajectory):
        self.traj, self.st = traj, GameState(traj.game_id, total_levels=len(traj.baselines))
        self.ctx = 0
        self.turn = None  # the turn being played (drawn at its request)
        self.trimmed = False  # the current turn's trim is done
        self.prefill = 0  # tokens to prefill before the next decode
        self.phase = "idle"  # idle | prefill | decode | tool
        self.epoch = 0  # invalidates heap entries of an ended phase
        self.deadline = math.inf
        self.yielded_at: float | None = None
        self.levels_seen = 0


def simulate(trajs: Sequence[Trajectory], policy: Policy, scenario: Scenario,
             server: Server | None = None) -> Outcome:
    """Run `policy` over one drawn set in virtual time (event-driven, processor sharing)."""
    server = server or Server()
    sc, slots, budget = scenario, scenario.slots, scenario.budget_s
    trim_at = sc.context_tokens - sc.output_tokens
    trim_to = int(sc.evict_to * sc.context_tokens)
    games = {t.game_id: _Game(t) for t in trajs}
    order = [g.st for g in games.values()]
    now = V = 0.0  # V: tokens one stream has decoded since the start (all streams decode alike)
    decoding = 0
    dec_heap: list = []  # (V at which the turn's decode ends, seq, epoch, gid)
    busy_heap: list = []  # (time the prefill or tool call ends, seq, epoch, gid)
    dead_heap: list = []  # (a game's own deadline, gid), for those before the budget's end
    hold = max_hold = 0  # games holding a slot
    seq = 0
    ready: deque[_Game] = deque()  # games at a model request
    consult = True
    recheck: dict[str, int] = {}
    wake_at: float | None = None
    idle = 0.0
    yields = preempts = 0
    last_end = 0.0

    def push(heap, key, g):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (key, seq, g.epoch, g.st.game_id))

    def end(g: _Game, t: float) -> None:
        nonlocal decoding, last_end, hold
        if g.phase == "decode":
            decoding -= 1
        hold -= g.st.status == "running"
        g.epoch += 1
        g.phase, g.st.status = "idle", "done"
        last_end = max(last_end, t)

    def give_up(g: _Game, reason: str) -> None:
        nonlocal consult, yields, preempts, hold
        hold -= 1
        g.st.release(reason)
        g.yielded_at = now
        yields += 1
        preempts += reason == "preempted"
        consult = True

    def request(g: _Game) -> None:
        """The game is at a model request and holds a slot."""
        nonlocal consult, decoding
        if g.turn is None:
            g.turn, g.trimmed = g.traj.next_turn(), False
            if g.turn is None:
                end(g, now)
                consult = True
                return
        if not g.trimmed and g.ctx > trim_at:
            g.ctx, g.trimmed, g.prefill = trim_to, True, trim_to
            give_up(g, "trim")
            return
        g.trimmed = True
        if g.st.preempt_requested:
            give_up(g, "preempted")
            return
        if g.prefill > 0:
            g.phase = "prefill"
            push(busy_heap, now + server.prefill_s(g.prefill), g)
            g.prefill = 0
        else:
            g.phase = "decode"
            decoding += 1
            push(dec_heap, V + g.turn[0], g)

    def apply(d) -> None:
        nonlocal recheck, wake_at, hold, max_hold
        for gid in d.stop:
            g = games[gid]
            if g.st.status in ("running", "waiting"):
                end(g, now)
        for gid in d.preempt:
            if games[gid].st.status == "running":
                games[gid].st.preempt_requested = True
        recheck, wake_at = d.recheck, d.wake_at
        free = slots - hold
        for gid in d.start:
            if free <= 0 or now >= budget:
                break
            g = games[gid]
            if g.st.status == "queued":
                g.ctx, g.prefill = server.first_prompt_tokens, server.first_prompt_tokens
            elif g.st.status == "waiting":
                if g.yielded_at is not None and g.yielded_at < now:  # its cached prefix is gone
                    g.prefill = max(g.prefill, g.ctx)
            else:
                continue
            g.st.grant(now)
            if g.deadline == math.inf:  # as the runner does: never past the budget
                g.deadline = min(d.deadlines.get(gid, budget), budget)
                if g.deadline < budget:
                    heapq.heappush(dead_heap, (g.deadline, gid))
            free -= 1
            hold += 1
            max_hold = max(max_hold, hold)
            ready.append(g)

    for _ in range(10_000_000):
        while True:
            while ready:
                g = ready.popleft()
                if g.st.status == "running":
                    request(g)
            if not consult:
                break
            consult = False
            apply(policy.decide(now, budget, slots, order))
        # The next event.
        rate = server.per_stream(decoding)
        while dec_heap and dec_heap[0][2] != games[dec_heap[0][3]].epoch:
            heapq.heappop(dec_heap)
        while busy_heap and busy_heap[0][2] != games[busy_heap[0][3]].epoch:
            heapq.heappop(busy_heap)
        t_dec = now + (dec_heap[0][0] - V) / rate if dec_heap and rate > 0 else math.inf
        t_busy = busy_heap[0][0] if busy_heap else math.inf
        while dead_heap and games[dead_heap[0][1]].st.status not in ("running", "waiting"):
            heapq.heappop(dead_heap)
        t_dead = dead_heap[0][0] if dead_heap else math.inf
        t_wake = wake_at if wake_at is not None and wake_at > now else math.inf
        t = min(t_dec, t_busy, t_dead, t_wake, budget)
        idle += (slots - hold) * (t - now)
        V += rate * (t - now)
        now = t
        if now >= budget:
            for g in games.values():
                if g.st.status in ("running", "waiting"):
                    end(g, budget)
            break
        if t == t_dec:
            _, _, _, gid = heapq.heappop(dec_heap)
            g = games[gid]
            decoding -= 1
            g.st.progress(levels=g.st.levels, actions=g.st.actions, tokens=g.st.tokens + g.turn[0], now=now)
            due = recheck.get(gid)
            if due is not None and g.st.tokens >= due:
                consult = True
            g.phase = "tool"
            g.epoch += 1
            push(busy_heap, now + server.tool_s + server.prefill_s(g.turn[1] - g.turn[0]), g)
        elif t == t_busy:
            _, _, _, gid = heapq.heappop(busy_heap)
            g = games[gid]
            g.epoch += 1
            if g.phase == "prefill":
                g.phase = "decode"
                decoding += 1
                push(dec_heap, V + g.turn[0], g)
            else:  # the tool call is over: the turn's actions and levels are in
                gen, growth, actions, levels = g.turn
                g.turn, g.ctx, g.phase = None, g.ctx + growth, "idle"
                first = g.st.actions == 0 and actions > 0
                levelled = g.st.progress(levels=levels, actions=actions, tokens=g.st.tokens, now=now)
                if first and recheck.get(gid) is not None:
                    consult = True
                if levels >= len(g.traj.baselines):
                    end(g, now)
                    consult = True
                elif levelled:
                    give_up(g, "level")
                else:
                    ready.append(g)
        elif t == t_dead:
            while dead_heap and dead_heap[0][0] <= now:
                g = games[heapq.heappop(dead_heap)[1]]
                if g.st.status in ("running", "waiting"):
                    end(g, now)
            consult = True
        else:
            consult = True
    else:
        raise RuntimeError("simulation did not converge")
    scores = [score(g.traj, g.st.levels) for g in games.values()]
    span = slots * max(now, 1e-9)
    return Outcome(
        score=float(np.mean(scores)),
        levels=sum(g.st.levels for g in games.values()),
        unplayed=sum(1 for s in order if s.started_at is None),
        idle_slot_share=idle / span,
        tokens=sum(s.tokens for s in order),
        yields=yields,
        preemptions=preempts,
        last_end=last_end,
        all_started_s=max((s.started_at if s.started_at is not None else math.inf) for s in order),
        max_holding=max_hold,
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
