"""The curve-extension hazard model: sane factors, exact inversion, calibrated on the data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from duck.paths import SHARED

from scheduler import curves, extend
from scheduler.simulate import GameDraw, GameSim

TRACES = SHARED / "duck-traces" / "runs.jsonl"
PUBLIC_GAMES = SHARED / "public-games.json"


@pytest.fixture(scope="module")
def duck():
    if not (TRACES.exists() and PUBLIC_GAMES.exists()):
        pytest.skip("Duck traces not available (../shared/duck-traces)")
    runs = curves.load_runs(TRACES, curves.load_baselines(PUBLIC_GAMES))
    return runs, extend.fit(runs)


def _cum_hazard(m, gid, levels, tau0, dt, n=20000):
    taus = tau0 + (np.arange(n) + 0.5) * dt / n
    return sum(m.rate(gid, levels, t) for t in taus) * dt / n


def test_time_to_next_inverts_the_cumulative_hazard(duck):
    _, m = duck
    for gid, levels, tau0, e in [("ft09-0d8bbf25", 0, 0.0, 0.7), ("ar25-0c556536", 1, 700.0, 0.2),
                                 ("vc33-5430563c", 0, 2500.0, 1.3)]:
        dt = m.time_to_next(gid, levels, tau0, e)
        assert _cum_hazard(m, gid, levels, tau0, dt) == pytest.approx(e, rel=1e-3)


def test_fitted_factors_are_sane(duck):
    _, m = duck
    assert m.h[0] == pytest.approx(1.0) and m.b[0] == pytest.approx(1.0)
    assert all(x > 0 for x in m.h)
    assert m.h[-1] < min(m.h[:-1])  # the tail is the slowest stretch (the Duck gets stuck)
    assert 0 < m.b[1] < 1  # later levels come more slowly than level 1
    assert all(v > 0 for v in m.a.values())  # even never-solved games keep a small rate
    assert m.loglik > m.loglik_const  # beats a per-game constant hazard on the same data
    rep = extend.fit_report(m)
    assert rep["aic"] < rep["aic_per_game_constant"]
    # Never-solved games (g50t, m0r0, sk48, tr87, wa30) get less than any solved one.
    assert m.a["g50t-5849a774"] < min(m.a[g] for g in ("cn04-2fe56bfb", "ls20-9607627b"))


def test_model_reproduces_the_recorded_levels(duck):
    """Played from t=0 by the model alone, each run should reach about its recorded levels."""
    runs, m = duck
    sims = []
    for r in runs:
        for s in range(4):
            g = GameSim(GameDraw(0, r, (), 1000 * r.pass_ + s), m, extend=True)
            g.seg = g._modelled(0.0, 0)
            g.advance(2700.0)
            sims.append(g.levels)
    observed = np.mean([len(r.level_times) for r in runs])
    assert np.mean(sims) == pytest.approx(observed, rel=0.2)


def test_extension_past_45_minutes_adds_a_few_levels_not_many(duck):
    runs, m = duck
    extra = []
    for r in runs:
        g = GameSim(GameDraw(0, r, (), r.pass_ + 17), m, extend=True)
        g.advance(7920.0)  # the Duck's 132 minutes
        extra.append(g.levels - len(r.level_times))
        assert all(b > a for a, b in zip(g.level_times, g.level_times[1:]))
    per_game = np.mean(extra)
    assert 0.05 < per_game < 0.6, per_game  # the tail hazard is low, but not zero
    assert math.isfinite(per_game)
