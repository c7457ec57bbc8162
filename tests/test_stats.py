"""duck.lab.stats: the paired A/B statistics and their calibration."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from duck.lab.stats import bootstrap_ci, compare, scores_from_runs_jsonl, sign_flip_pvalue, t975, within_noise

TRACES = Path(__file__).resolve().parents[2] / "shared" / "duck-traces" / "runs.jsonl"


def test_identical_arms_give_zero_and_p_one():
    a = {"g1": {0: 1.0, 1: 2.0}, "g2": {0: 0.0, 1: 5.0}}
    doc = compare(a, a)
    assert doc["delta"] == 0.0 and doc["p_value"] == 1.0 and doc["ci95"] == [0.0, 0.0]
    assert doc["ties"] == 2 and doc["pair_ties"] == 4 and not doc["significant"]
    assert set(doc) >= {"delta", "ci95", "p_value", "passes", "games"}


def test_delta_is_mean_over_games_of_mean_paired_difference():
    a = {"g1": {0: 0.0, 1: 0.0, 2: 0.0}, "g2": {0: 1.0}}
    b = {"g1": {0: 3.0, 1: 0.0, 2: 0.0}, "g2": {0: 0.0}}
    doc = compare(a, b)
    assert doc["delta"] == pytest.approx((1.0 + -1.0) / 2)
    assert doc["games"]["g1"]["delta"] == pytest.approx(1.0)
    assert doc["games"]["g1"]["wins"] == 1 and doc["games"]["g1"]["ties"] == 2
    assert doc["wins"] == 1 and doc["losses"] == 1
    assert doc["passes"] == 3 and doc["n_pairs"] == 4


def test_exact_sign_flip_p_value():
    # three games, one positive pair each: 2 of the 8 sign patterns are as extreme (+++ and ---)
    a = {g: {0: 0.0} for g in "xyz"}
    b = {g: {0: 1.0} for g in "xyz"}
    doc = compare(a, b)
    assert doc["p_value"] == doc["p_value_pairs"] == pytest.approx(2 / 8)
    assert "exact" in doc["method"]["p_value"] and "over games" in doc["method"]["p_value"]


def test_games_are_the_unit_a_repeated_difference_counts_once():
    """The issue's case: 25 games, 3 passes, a near-deterministic policy: 2 games better and 3
    worse, each repeating its difference on every pass, 20 tied. Over pairs the 15 differing
    pairs look like 15 coin flips; over games there are 5 observations, and no 5 observations
    can reach 5% (the smallest two-sided p is 2/2^5)."""
    per_game = {"g50t": -3.57, "w1": -0.4, "w2": -0.3, "b1": 0.2, "b2": 0.1}
    a = {f"t{k}": {p: 1.0 for p in range(3)} for k in range(20)} | {g: {p: 5.0 for p in range(3)} for g in per_game}
    b = {f"t{k}": {p: 1.0 for p in range(3)} for k in range(20)} | \
        {g: {p: 5.0 + d for p in range(3)} for g, d in per_game.items()}
    doc = compare(a, b)
    assert doc["p_value_pairs"] < 0.05 and doc["significant_pairs"]  # the old verdict: "worse"
    d = list(per_game.values())  # over games: the 32 sign patterns of the 5 game means, enumerated here
    extreme = sum(abs(sum(s * x for s, x in zip(signs, d))) >= abs(sum(d)) - 1e-9
                  for signs in itertools.product((1, -1), repeat=5))
    assert doc["p_value"] == pytest.approx(extreme / 32) == pytest.approx(0.3125) and not doc["significant"]
    assert doc["n_games_differing"] == 5 and (doc["wins"], doc["losses"], doc["ties"]) == (2, 3, 20)
    assert doc["unit"] == "game" and set(doc["nulls"]) == {"p_value", "ci95", "p_value_pairs"}
    assert all(isinstance(v, str) and len(v) > 40 for v in doc["nulls"].values())


def test_monte_carlo_agrees_with_exact():
    rng = np.random.default_rng(1)
    diffs = [rng.normal(0.3, 1.0, size=4) for _ in range(4)]  # 16 pairs: exact enumeration
    exact, how = sign_flip_pvalue(diffs)
    assert how == "exact"
    import duck.lab.stats as st
    old = st.EXACT_MAX_PAIRS
    try:
        st.EXACT_MAX_PAIRS = 4
        mc, how = sign_flip_pvalue(diffs, n_perm=40000, rng=np.random.default_rng(2))
    finally:
        st.EXACT_MAX_PAIRS = old
    assert how == "monte-carlo"
    assert mc == pytest.approx(exact, abs=0.015)


def test_unpaired_runs_are_counted_not_used():
    doc = compare({"g": {0: 1.0, 1: 2.0}, "h": {0: 1.0}}, {"g": {0: 1.0, 2: 9.0}})
    assert doc["unpaired"] == {"a": 2, "b": 1}
    assert doc["n_pairs"] == 1 and list(doc["games"]) == ["g"]


def test_bootstrap_interval_brackets_the_mean_and_is_wider_than_plain_percentile():
    v = np.array([0.0, 0.0, 0.5, 1.0, 3.0, -0.5, 0.2, 0.0])
    lo, hi = bootstrap_ci(v, n_boot=4000)
    assert lo < v.mean() < hi
    rng = np.random.default_rng(0)
    means = v[rng.integers(0, len(v), (4000, len(v)))].mean(axis=1)
    plo, phi = np.quantile(means, [0.025, 0.975])
    assert hi - lo > phi - plo
    assert bootstrap_ci(np.array([2.0])) == (2.0, 2.0)


def test_within_noise():
    assert within_noise(np.array([1.0]))  # one pass: unknown
    assert not within_noise(np.array([0.0, 0.0, 0.0]))  # identical play
    assert not within_noise(np.array([2.0, 2.0]))  # consistent difference
    assert within_noise(np.array([1.0, -1.0, 0.5]))
    assert not within_noise(np.array([5.0, 5.1, 4.9, 5.0]))


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706)
    assert t975(30) == pytest.approx(2.042)
    assert t975(60) == pytest.approx(2.000, abs=0.002)
    assert t975(10_000) == pytest.approx(1.96, abs=0.001)


def test_runs_jsonl_rows():
    rows = [{"game_id": "g", "pass": 0, "final_score": 1.5}, {"game_id": "g", "pass": 1, "final_score": 0}]
    assert scores_from_runs_jsonl(rows) == {"g": {0: 1.5, 1: 0.0}}
    with pytest.raises(ValueError):
        scores_from_runs_jsonl(rows + [rows[0]])


def test_a_a_on_zero_inflated_scores_rejects_about_five_percent():
    """Synthetic A/A shaped like the Duck's scores: most runs 0, some a few percent, a
    few games far higher. The fixed design must reject at most ~5% of the time."""
    rng = np.random.default_rng(7)
    level = rng.gamma(0.6, 3.0, size=20)  # per-game typical score
    reps, rejected = 150, 0
    for _ in range(reps):
        draw = lambda: {f"g{j}": {p: float(rng.random() < 0.5) * rng.exponential(level[j])
                                 for p in range(3)} for j in range(20)}
        doc = compare(draw(), draw(), n_boot=200, n_perm=500, seed=int(rng.integers(1 << 30)),
                      games_detail=False)
        rejected += doc["p_value"] < 0.05
    assert rejected / reps <= 0.09


@pytest.mark.skipif(not TRACES.exists(), reason="the Duck's traces are not here")
def test_calibration_bench_on_the_traces(capsys):
    from devkit.bench.calibration import main
    assert main(["--reps", "60", "--perm", "400", "--boot", "200", "--shifts"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for name, d in doc["designs"].items():
        assert name.startswith("A/A")
        assert d["rejection_rate"] <= 0.15 and d["rejection_rate_pairs"] <= 0.15  # ~0.05; 60 splits: room for chance
    assert set(doc["designs"]) == {"A/A fixed-3", "A/A fixed-5", "A/A adaptive 3..5"}
