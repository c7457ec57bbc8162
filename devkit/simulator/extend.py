"""A hazard model of the next level, fitted on the recorded curves, to extend them.

The recorded runs stop at 45 minutes, and a Kaggle schedule gives a game far longer (a fresh
start on a level no recorded run reached has no curve to splice either). Past the data the
simulator draws the next level from this model:

    hazard(game g, level class c, tau) = a_g * b_c * h(tau)

tau is the time since the last level (or since the start; in generated tokens: `fit_tokens`);
h is piecewise constant on TAU_EDGES and its last piece is held beyond the data (a constant tail
neither invents a recovery nor extrapolates a decay the data cannot show); c is level 1 or a
later level; a_g is per game, shrunk toward the pooled rate by a Gamma prior of PRIOR_EVENTS
pseudo-events, so a game never seen to complete a level keeps a small rate. Fitted by Poisson
maximum likelihood (cyclic updates of the three factors); `fit_report` gives the numbers
(`duck simulate --show-fit`); the fit and its checks are in docs/scheduler.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .curves import Run

# Edges of the pieces of h(tau), seconds. 300 s is about 6 Duck turns, fine enough to show the
# early rise; the last piece starts at 1800 s because fewer than 30 events lie beyond.
TAU_EDGES = (0.0, 300.0, 600.0, 900.0, 1200.0, 1800.0)
# Strength of the shrinkage of a_g toward the pooled rate, in pseudo-events (Jeffreys-like).
PRIOR_EVENTS = 0.5
ITERATIONS = 200


def _exposure(tau0: float, tau1: float, edges: Sequence[float] = TAU_EDGES) -> np.ndarray:
    """Seconds (or tokens) spent in each tau piece while tau runs from tau0 to tau1."""
    lo = np.asarray(edges)
    hi = np.append(lo[1:], np.inf)
    return np.clip(np.minimum(tau1, hi) - np.maximum(tau0, lo), 0.0, None)


def _piece(tau: float, edges: Sequence[float] = TAU_EDGES) -> int:
    return int(np.searchsorted(edges, tau, side="right") - 1)


@dataclass
class HazardModel:
    """Fitted factors; `rate` is per second."""

    a: dict[str, float]  # per game
    b: tuple[float, float]  # level 1, later levels (b[0] == 1)
    h: tuple[float, ...]  # per tau piece (h[0] == 1)
    pooled_a: float
    loglik: float = 0.0
    loglik_const: float = 0.0  # per-game constant hazard, same data
    n_params: int = 0
    counts: dict = field(default_factory=dict)
    edges: tuple[float, ...] = TAU_EDGES  # of the tau pieces, in the unit tau is counted in

    def rate(self, game_id: str, levels: int, tau: float) -> float:
        return self.a.get(game_id, self.pooled_a) * self.b[min(levels, 1)] * self.h[_piece(tau, self.edges)]

    def time_to_next(self, game_id: str, levels: int, tau0: float, e: float) -> float:
        """Seconds after tau0 until the cumulative hazard reaches e (an Exp(1) draw)."""
        ag = self.a.get(game_id, self.pooled_a) * self.b[min(levels, 1)]
        if ag <= 0:
            return math.inf
        need = e / ag  # in units of integral of h
        tau = tau0
        k = _piece(tau, self.edges)
        while True:
            top = self.edges[k + 1] if k + 1 < len(self.edges) else math.inf
            if self.h[k] > 0:
                span = (top - tau) * self.h[k]
                if span >= need:
                    return tau + need / self.h[k] - tau0
                need -= span
            elif top == math.inf:
                return math.inf
            tau, k = top, k + 1


def _segments(run: Run):
    """(tau at start, tau at end, event?, levels completed before) for each stretch of play."""
    t0 = 0.0
    for i, t in enumerate(run.level_times):
        yield 0.0, max(0.0, t - t0), True, i
        t0 = t
    yield 0.0, max(0.0, run.end - t0), False, len(run.level_times)


def fit(runs: Sequence[Run], edges: Sequence[float] = TAU_EDGES) -> HazardModel:
    """Poisson MLE of a_g * b_c * h(tau) on every stretch between levels of every run (any
    object with `game_id`, `level_times` and `end`, in the unit of `edges`)."""
    edges = tuple(float(e) for e in edges)
    games = sorted({r.game_id for r in runs})
    gi = {g: i for i, g in enumerate(games)}
    K = len(edges)
    E = np.zeros((len(games), 2, K))  # exposure seconds
    N = np.zeros((len(games), 2, K))  # events
    for r in runs:
        for tau0, tau1, ev, lv in _segments(r):
            c = min(lv, 1)
            E[gi[r.game_id], c] += _exposure(tau0, tau1, edges)
            if ev:
                N[gi[r.game_id], c, _piece(tau1 - 1e-9, edges) if tau1 > 0 else 0] += 1
    pooled = N.sum() / max(E.sum(), 1e-9)
    a = np.full(len(games), pooled)
    b = np.ones(2)
    h = np.ones(K)
    alpha = PRIOR_EVENTS
    for _ in range(ITERATIONS):
        ex_h = np.einsum("g,c,gck->k", a, b, E)
        h = np.where(ex_h > 0, N.sum((0, 1)) / np.maximum(ex_h, 1e-12), 0.0)
        h = h / h[0] if h[0] > 0 else h
        ex_b = np.einsum("g,k,gck->c", a, h, E)
        b = N.sum((0, 2)) / np.maximum(ex_b, 1e-12)
        b = b / b[0]
        ex_a = np.einsum("c,k,gck->g", b, h, E)
        prior_mean = N.sum() / max(ex_a.sum(), 1e-12)
        a = (N.sum((1, 2)) + alpha) / (ex_a + alpha / prior_mean)
    mu = np.einsum("g,c,k,gck->gck", a, b, h, E)
    # Poisson log-likelihood without the log(N!) terms (equal in both models).
    ll = float(np.sum(np.where(N > 0, N * np.log(np.maximum(mu, 1e-300)), 0.0) - mu))
    # Per-game constant hazard on the same data: rate = events / exposure (no shrinkage).
    Ng, Eg = N.sum((1, 2)), E.sum((1, 2))
    lam = np.where(Ng > 0, Ng / np.maximum(Eg, 1e-12), 0.0)
    mu0 = lam[:, None, None] * E
    ll0 = float(np.sum(np.where(N > 0, N * np.log(np.maximum(mu0, 1e-300)), 0.0) - mu0))
    counts = {
        "events_by_tau_piece": N.sum((0, 1)).astype(int).tolist(),
        "exposure_by_tau_piece": np.round(E.sum((0, 1))).astype(int).tolist(),  # seconds or tokens
        "expected_by_tau_piece": np.round(mu.sum((0, 1)), 1).tolist(),
        "events_by_level_class": N.sum((0, 2)).astype(int).tolist(),
        "expected_by_level_class": np.round(mu.sum((0, 2)), 1).tolist(),
    }
    return HazardModel(
        a={g: float(a[i]) for g, i in gi.items()},
        b=(float(b[0]), float(b[1])),
        h=tuple(float(x) for x in h),
        pooled_a=float(np.mean(a)),
        loglik=ll,
        loglik_const=ll0,
        n_params=len(games) + 1 + (K - 1),
        counts=counts,
        edges=edges,
    )


# The pieces in generated tokens: TAU_EDGES at the Duck's pace (~20.4 tokens per second per
# game: 55K tokens in 45 minutes, median run), so that the two fits cut the curves alike.
TOKEN_EDGES = (0.0, 6_000.0, 12_000.0, 18_000.0, 24_000.0, 36_000.0)


@dataclass(frozen=True)
class _TokenStretch:
    game_id: str
    level_times: tuple[float, ...]
    end: float


def fit_tokens(runs) -> HazardModel:
    """The same model with tau in generated tokens, on devkit.simulator.traces.TokenRun curves."""
    return fit([_TokenStretch(r.game_id, tuple(float(x) for x in r.level_tokens()), float(r.tokens))
                for r in runs], TOKEN_EDGES)


def fit_report(m: HazardModel) -> dict:
    """The fit numbers (rates per hour, or per 100K tokens for a token fit), for the CLI."""
    tokens = tuple(m.edges) != tuple(TAU_EDGES)
    per, unit = (100_000, "per_100k_tokens") if tokens else (3600, "per_hour")
    rates = {g: round(v * per, 3) for g, v in sorted(m.a.items())}
    n_games = len(m.a)
    return {
        "model": f"hazard = a_game * b_level_class * h(tau); tau = {'tokens' if tokens else 'time'} since "
        f"last level; h constant past {m.edges[-1]:g} (per-game constant hazard beyond the data)",
        "tau_edges": list(m.edges),
        "h_relative": [round(x, 3) for x in m.h],
        "b_later_levels_vs_level1": round(m.b[1], 3),
        f"a_{unit}_level1_tau0": rates,
        f"tail_level1_{unit}_median_game": round(float(np.median(list(m.a.values()))) * m.h[-1] * per, 4),
        "loglik": round(m.loglik, 2),
        "loglik_per_game_constant": round(m.loglik_const, 2),
        "aic": round(2 * m.n_params - 2 * m.loglik, 1),
        "aic_per_game_constant": round(2 * n_games - 2 * m.loglik_const, 1),
        **m.counts,
    }

