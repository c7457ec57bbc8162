"""Replay recorded Duck progress curves under a scheduling policy, in virtual time.

Why: the only honest way to compare schedules before spending a Kaggle run is on what the
agent really did. Each simulated game follows one recorded run (runs.jsonl: levels and
actions at every turn); a fresh start splices in another recorded run of the same game from
the level reached; past the recorded end (45 minutes) the `extend` hazard model takes over
when the scenario allows it, otherwise the game is over ("exhausted").

Draws: a competition-like set is `n_games` games, each a game drawn uniformly from the pool
then one of its passes, plus a shuffled order of that game's other passes (splice sources)
and a private random stream for the model. All of it comes from the seed alone, before
any policy runs, so every policy plays the *same* draws for the same seed.

Scores are percent, per level "as recorded": from the actions spent on the level (the
abandoned attempt's actions included after a fresh start) and its human baseline. A stop
frees the slot at the next recorded turn boundary (at most 120 s later): the runner stops
a game between actions, not mid-thought. Without extension a game whose curve has ended is
over (its slot frees).

Results on passes 0-9, 200 seeds, paired (adaptive - fixed, 95% CI of the mean):
  30min  : 1.549 vs 1.492 points, +0.057 [+0.039, +0.075]; fixed ends at 7317 s (deadline
           7200 s, every seed over by a stop latency), adaptive by 7020 s.
  kaggle : 2.247 vs 2.133 points, +0.114 [+0.080, +0.148]; 94.9 vs 90.0 levels per set.
Tuned on all ten passes, checked on 10 half-pools (5 passes each, random splits): in
`30min` adaptive - fixed ranged from -0.002 to +0.123 (mean +0.050), so expect a smaller
and noisier margin on unseen runs than the CI above, which is over draws from one pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .curves import Run, game_score
from .extend import HazardModel
from .policy import GameState, Policy

# A stop lands between actions: the slot frees at the next turn boundary of the curve being
# replayed, but never later than one model request time-out (120 s) after the stop.
MAX_STOP_LATENCY_S = 120.0
# In a modelled stretch there are no turn boundaries: half of the median Duck turn (53 s).
MODEL_STOP_LATENCY_S = 27.0
# Without extension a modelled stretch (a fresh start no recorded run can splice) lasts at
# most as long as a recorded run: the data say nothing beyond.
HORIZON_S = 2700.0


@dataclass(frozen=True)
class Scenario:
    name: str
    budget_s: float  # scheduler budget (seconds from its start to the hard deadline)
    slots: int = 28
    n_games: int = 110
    extend: bool = False  # extend curves past their recorded end with the hazard model
    # The adaptive policy ends every game this long before the deadline, so that its stops
    # (freed up to MAX_STOP_LATENCY_S later) land before it: about twice the worst case. The
    # simulator's counterpart of the notebook's kaggle.margin_s (there is no teardown here).
    # `fixed` replays the Duck's split, which had no margin (and overruns by a stop latency).
    margin_s: float = 300.0


SCENARIOS = {
    # 4 waves of 28 slots x 30 min: `fixed` gives each of the 110 games exactly 1800 s,
    # well inside the recorded 45-minute curves.
    "30min": Scenario("30min", budget_s=4 * 1800.0),
    # 9 h less 12 min of start-up (vLLM install ~80 s + ~6.5 min to ready, and the notebook):
    # `fixed` then gives 132 min per game, exactly what the Duck gave.
    "kaggle": Scenario("kaggle", budget_s=9 * 3600.0 - 720.0, extend=True),
}


@dataclass(frozen=True)
class GameDraw:
    slot: int
    run: Run
    spares: tuple[Run, ...]  # other passes of the same game, in splice order
    seed: int

    @property
    def game_id(self) -> str:
        return f"{self.slot:03d}:{self.run.game_id}"


def draw_set(pool: dict[str, list[Run]], seed: int, n_games: int) -> list[GameDraw]:
    """A competition-like set: per slot a game uniformly, then a pass, then a splice order."""
    rng = np.random.default_rng(seed)
    games = sorted(pool)
    out = []
    for slot in range(n_games):
        runs = pool[games[int(rng.integers(len(games)))]]
        i = int(rng.integers(len(runs)))
        others = [r for j, r in enumerate(runs) if j != i]
        order = rng.permutation(len(others))
        out.append(GameDraw(slot, runs[i], tuple(others[k] for k in order), int(rng.integers(2**31))))
    return out


@dataclass
class _Segment:
    p0: float  # play time at which the segment starts
    a0: int  # game actions at p0
    run: Run | None  # recorded source, or None for the hazard model
    s0: float = 0.0  # source time at p0 (recorded)
    src_a0: int = 0  # source actions at s0 (recorded)
    next_k: int = 0  # index of the source's next level completion (recorded)
    next_p: float = math.inf  # play time of the next modelled level (model)
    end_p: float = math.inf  # play time at which this segment's curve ends


class GameSim:
    """One drawn game's trajectory; play time p is seconds since the game started."""

    def __init__(self, d: GameDraw, model: HazardModel, extend: bool):
        self.d, self.model, self.extend = d, model, extend
        self.rng = np.random.default_rng(d.seed)
        self.rate = d.run.late_rate()  # actions/s in modelled stretches
        self.spares = list(d.spares)
        self.level_actions: list[int] = []  # actions spent on each completed level
        self.level_times: list[float] = []  # play time of each completion
        self.last_mark = 0.0  # play time of the last level or fresh start (tau origin)
        self.actions_done = 0  # game actions at the last completion
        self.fresh_spliced = self.fresh_modelled = 0
        self.over_at: float | None = None  # won or exhausted
        self.seg = self._recorded(0.0, 0, d.run, 0.0, 0, 0)

    # -- segments ---------------------------------------------------------------------------
    def _recorded(self, p0, a0, run, s0, src_a0, k) -> _Segment:
        return _Segment(p0, a0, run, s0, src_a0, k, end_p=p0 + (run.end - s0))

    def _modelled(self, p0: float, a0: int) -> _Segment:
        seg = _Segment(p0, a0, None)
        if not self.extend:
            seg.end_p = p0 + HORIZON_S
        self._draw_next(seg, p0)
        return seg

    def _draw_next(self, seg: _Segment, p: float) -> None:
        e = float(self.rng.exponential())
        dt = self.model.time_to_next(self.d.run.game_id, self.levels, p - self.last_mark, e)
        seg.next_p = p + dt

    @property
    def levels(self) -> int:
        return len(self.level_actions)

    def actions(self, p: float) -> int:
        s = self.seg
        if s.run is not None:
            return s.a0 + s.run.actions_at(s.s0 + (p - s.p0)) - s.src_a0
        return s.a0 + int(self.rate * (p - s.p0))

    def _complete(self, p: float, total_actions: int) -> None:
        self.level_actions.append(max(1, total_actions - self.actions_done))
        self.level_times.append(p)
        self.actions_done = max(total_actions, self.actions_done + 1)
        self.last_mark = p
        if self.levels >= self.d.run.total_levels:
            self.over_at = p

    def next_event(self) -> float:
        """Play time of the next level or end of the curve (inf if none)."""
        if self.over_at is not None:
            return math.inf
        s = self.seg
        if s.run is not None:
            k = s.next_k
            nxt = s.p0 + s.run.level_times[k] - s.s0 if k < len(s.run.level_times) else math.inf
            return min(nxt, s.end_p)
        return min(s.next_p, s.end_p)

    def advance(self, p: float) -> None:
        """Apply every level and segment end up to play time p (inclusive)."""
        p += 1e-6  # (start + dt) - start can fall short of dt by a rounding error
        while self.over_at is None:
            s = self.seg
            if s.run is not None:
                k = s.next_k
                if k < len(s.run.level_times) and s.p0 + s.run.level_times[k] - s.s0 <= min(p, s.end_p):
                    t = s.p0 + s.run.level_times[k] - s.s0
                    self._complete(t, s.a0 + s.run.level_actions[k] - s.src_a0)
                    s.next_k += 1
                    continue
            elif s.next_p <= min(p, s.end_p):
                self._complete(s.next_p, self.actions(s.next_p))
                if self.over_at is None:
                    self._draw_next(s, s.next_p)
                continue
            if s.end_p <= p:
                if s.run is not None and self.extend:
                    self.seg = self._modelled(s.end_p, self.actions(s.end_p))
                    continue
                self.over_at = s.end_p  # exhausted: no data (or model) past this point
            return

    def fresh_start(self, p: float) -> None:
        """New model context at play time p: splice another run from the level reached."""
        a = self.actions(p)
        self.last_mark = p
        L = self.levels
        while self.spares:
            r = self.spares.pop(0)
            st = r.level_start(L)
            if st is not None and st[0] < r.end:
                self.seg = self._recorded(p, a, r, st[0], st[1], L)
                self.fresh_spliced += 1
                return
        self.seg = self._modelled(p, a)
        self.fresh_modelled += 1

    def stop_latency(self, p: float) -> float:
        s = self.seg
        if s.run is not None:
            nxt = s.p0 + s.run.next_turn_after(s.s0 + (p - s.p0)) - s.s0
            return min(MAX_STOP_LATENCY_S, max(0.0, nxt - p))
        return MODEL_STOP_LATENCY_S

    def score(self) -> float:
        return game_score(self.d.run.baselines, self.level_actions)


@dataclass
class Outcome:
    score: float  # mean game score over the set, percent
    levels: int  # levels completed over the set
    last_end: float
    unplayed: int
    fresh_spliced: int
    fresh_modelled: int
    per_game_scores: list[float] = field(default_factory=list)


def simulate(
    draws: Sequence[GameDraw], policy: Policy, model: HazardModel, scenario: Scenario
) -> Outcome:
    """Run `policy` over one drawn set in virtual time (event-driven)."""
    budget, slots = scenario.budget_s, scenario.slots
    sims = {d.game_id: GameSim(d, model, scenario.extend) for d in draws}
    states = {gid: GameState(gid) for gid in sims}
    order = [states[d.game_id] for d in draws]
    deadline: dict[str, float] = {}
    free_at: dict[str, float] = {}  # stopping games: when their slot frees
    now, last_end = 0.0, 0.0

    def stop(gid: str, t: float) -> None:
        st, sim = states[gid], sims[gid]
        p = t - st.started_at
        sim.advance(p)  # levels up to the stop count; the game is never advanced again
        st.stop_requested = True
        free_at[gid] = t + sim.stop_latency(p)

    for _ in range(100_000):
        d = policy.decide(now, budget, slots, order)
        for gid in d.stop:
            if states[gid].status == "running" and not states[gid].stop_requested:
                stop(gid, now)
        for gid in d.fresh:
            st = states[gid]
            if st.status == "running" and not st.stop_requested:
                sims[gid].fresh_start(now - st.started_at)
                st.fresh_starts += 1
                st.last_fresh_at = now
        n_running = sum(1 for s in order if s.status == "running")
        for gid in d.start[: max(0, slots - n_running)]:
            st = states[gid]
            if st.status != "queued":
                continue
            st.status, st.started_at = "running", now
            # As the runner does: no game may run past the budget, whatever the policy said.
            deadline[gid] = min(d.deadlines.get(gid, budget), budget)
        # Next event time.
        cands = [d.wake_at] if d.wake_at is not None and d.wake_at > now else []
        for st in order:
            if st.status != "running":
                continue
            if st.stop_requested:
                cands.append(free_at[st.game_id])
            else:
                cands.append(st.started_at + sims[st.game_id].next_event())
                cands.append(deadline[st.game_id])
        cands = [c for c in cands if c > now - 1e-9 and c < math.inf]
        if not cands:
            break
        now = max(now, min(cands))
        for st in order:
            if st.status != "running":
                continue
            gid, sim = st.game_id, sims[st.game_id]
            if st.stop_requested:
                if free_at[gid] <= now:
                    st.status = "done"
                    last_end = max(last_end, free_at[gid])
                continue
            t = min(now, deadline[gid])
            sim.advance(t - st.started_at)
            if sim.levels > st.levels:
                st.levels, st.last_level_at = sim.levels, st.started_at + sim.level_times[-1]
            over = math.inf if sim.over_at is None else sim.over_at
            st.actions = sim.actions(min(t - st.started_at, over))
            if st.started_at + over <= t:
                st.status = "done"
                last_end = max(last_end, st.started_at + over)
            elif now >= deadline[gid]:
                stop(gid, deadline[gid])
    else:
        raise RuntimeError("simulation did not converge")
    scores = [sims[s.game_id].score() for s in order]
    return Outcome(
        score=float(np.mean(scores)),
        levels=sum(sims[s.game_id].levels for s in order),
        last_end=last_end,
        unplayed=sum(1 for s in order if s.started_at is None),
        fresh_spliced=sum(s.fresh_spliced for s in sims.values()),
        fresh_modelled=sum(s.fresh_modelled for s in sims.values()),
        per_game_scores=scores,
    )


def group_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    pool: dict[str, list[Run]] = {}
    for r in runs:
        pool.setdefault(r.game_id, []).append(r)
    return pool


def mean_ci(xs: Sequence[float]) -> dict:
    """Mean and normal 95% confidence interval of the mean over seeds."""
    a = np.asarray(xs, dtype=float)
    half = 1.96 * a.std(ddof=1) / math.sqrt(len(a)) if len(a) > 1 else 0.0
    m = float(a.mean())
    return {"mean": round(m, 4), "ci95": [round(float(m - half), 4), round(float(m + half), 4)]}


def evaluate(
    runs: Sequence[Run],
    policies: dict[str, Policy],
    scenario: Scenario,
    seeds: Sequence[int],
    model: HazardModel,
) -> dict[str, list[Outcome]]:
    """Every policy on the same draws, seed by seed."""
    pool = group_runs(runs)
    out: dict[str, list[Outcome]] = {name: [] for name in policies}
    for seed in seeds:
        draws = draw_set(pool, seed, scenario.n_games)
        for name, pol in policies.items():
            out[name].append(simulate(draws, pol, model, scenario))
    return out


def summarize(outcomes: Sequence[Outcome], scenario: Scenario) -> dict:
    ends = [o.last_end for o in outcomes]
    return {
        "expected_levels": mean_ci([o.levels for o in outcomes]),
        "expected_score": mean_ci([o.score for o in outcomes]),
        "last_end_seconds": round(float(np.mean(ends)), 1),
        "last_end_seconds_max": round(float(np.max(ends)), 1),
        "deadline_seconds": scenario.budget_s,
        "runs_past_deadline": int(sum(e > scenario.budget_s for e in ends)),
        "unplayed_games": int(sum(o.unplayed for o in outcomes)),
        "fresh_starts_per_set": {
            "spliced": round(float(np.mean([o.fresh_spliced for o in outcomes])), 2),
            "modelled": round(float(np.mean([o.fresh_modelled for o in outcomes])), 2),
        },
    }


def paired(a: Sequence[Outcome], b: Sequence[Outcome]) -> dict:
    """a - b seed by seed (same draws), with the 95% CI of the mean difference."""
    return {
        "score": mean_ci([x.score - y.score for x, y in zip(a, b)]),
        "levels": mean_ci([x.levels - y.levels for x, y in zip(a, b)]),
        "seeds_a_better": int(sum(x.score > y.score for x, y in zip(a, b))),
        "seeds": len(a),
    }
