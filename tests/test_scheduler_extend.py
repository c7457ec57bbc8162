"""The curve-extension hazard model: sane factors, exact inversion, calibrated on the data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from duck.paths import SHARED

from devkit.simulator import curves, extend

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
            rng = np.random.default_rng(1000 * r.pass_ + s)
            tau, levels, t_end = 0.0, 0, r.end
            while True:
                dt = m.time_to_next(r.game_id, levels, tau, float(rng.exponential()))
                if tau + dt > t_end:
                    break
                t_end -= tau + dt
                tau, levels = 0.0, levels + 1
            sims.append(levels)
    observed = np.mean([len(r.level_times) for r in runs])
    assert np.mean(sims) == pytest.approx(observed, rel=0.2)


def test_the_same_model_in_tokens(duck):
    """The fit in generated tokens (what the token simulator extends the Duck's curves with)."""
    from devkit.simulator import traces

    tok = traces.load_token_runs(TRACES, curves.load_baselines(PUBLIC_GAMES))
    m = extend.fit_tokens(tok)
    assert m.edges == extend.TOKEN_EDGES and m.h[0] == pytest.approx(1.0)
    assert m.loglik > m.loglik_const and 0 < m.b[1] < 1
    rep = extend.fit_report(m)
    assert "a_per_100k_tokens_level1_tau0" in rep and rep["aic"] < rep["aic_per_game_constant"]
    dt = m.time_to_next("ft09-0d8bbf25", 0, 5000.0, 0.7)
    assert _cum_hazard(m, "ft09-0d8bbf25", 0, 5000.0, dt) == pytest.approx(0.7, rel=1e-3)
    assert math.isfinite(dt)
