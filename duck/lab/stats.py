"""Paired A/B statistics over games: what `duck ab`, `duck ab-stats` and the calibration use.

The data are scores (percent, as duck.play.scoring) of two arms, A (the baseline) and B (the
variant), keyed by game and pass; a pass of A and the same pass of B form a *pair* (same game,
same seed, run interleaved). Everything is B − A. The rule: games are the unit. A competitor
asks whether B will do better on games like these but not these, and a near-deterministic
policy repeats one difference on every pass, so every decision is made on one number per game,
its mean paired difference d_g: `delta` (their mean), `p_value` (the decision: a two-sided
sign-flip over games), `ci95` (a bootstrap over whole games, widened for small samples);
`p_value_pairs`, the sign-flip over pairs, is secondary (the sharp null: B changes nothing in
these very runs). Per game: the mean difference, its t-interval over passes, wins/losses/ties.
Each test's null and method, the assumptions that make the numbers mean what they say, and the
A/A calibration: docs/ab.md.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Mapping

import numpy as np

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
EXACT_MAX_PAIRS = 16


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t (table to 30 df, then a Cornish-Fisher step)."""
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.959964 + 2.372 / df


Scores = Mapping[str, Mapping[Any, float]]  # game -> pass key -> score


def pair_up(a: Scores, b: Scores) -> tuple[dict[str, list[tuple[Any, float, float]]], dict[str, int]]:
    """Pairs per game, sorted by key; and how many runs of each arm found no partner."""
    pairs: dict[str, list[tuple[Any, float, float]]] = {}
    unpaired = {"a": 0, "b": 0}
    for game in sorted(set(a) | set(b)):
        ga, gb = a.get(game, {}), b.get(game, {})
        keys = sorted(set(ga) & set(gb), key=lambda k: (str(type(k)), k))
        unpaired["a"] += len(set(ga) - set(gb))
        unpaired["b"] += len(set(gb) - set(ga))
        if keys:
            pairs[game] = [(k, float(ga[k]), float(gb[k])) for k in keys]
    return pairs, unpaired


def sign_flip_pvalue(diffs: list[np.ndarray], *, n_perm: int = 20000,
                     rng: np.random.Generator | None = None) -> tuple[float, str]:
    """Two-sided p-value of mean-over-groups(mean-within-group(d)) = 0 by flipping the sign of
    each element: one group per game holding its pairs' differences (the pair-level test), or
    one single-element group per game holding its mean difference (the game-level test).

    Returns (p, method) with method "exact" or "monte-carlo"."""
    groups = [np.asarray(d, dtype=float) for d in diffs if len(d)]
    if not groups:
        return 1.0, "exact"
    weights = np.concatenate([np.full(len(d), 1.0 / (len(groups) * len(d))) for d in groups])
    wd = weights * np.concatenate(groups)
    wd = wd[np.abs(wd) > 1e-12]
    m = len(wd)
    if m == 0:
        return 1.0, "exact"
    observed = abs(wd.sum())
    tol = 1e-9 * max(1.0, observed)
    if m <= EXACT_MAX_PAIRS:
        bits = (np.arange(2 ** m)[:, None] >> np.arange(m)) & 1
        stats = np.abs(((1 - 2 * bits) * wd).sum(axis=1))
        return float(np.mean(stats >= observed - tol)), "exact"
    rng = rng or np.random.default_rng(0)
    hits, done, chunk = 0, 0, max(1, 4_000_000 // m)
    while done < n_perm:
        k = min(chunk, n_perm - done)
        signs = rng.integers(0, 2, size=(k, m), dtype=np.int8) * 2 - 1
        hits += int(np.sum(np.abs(signs @ wd) >= observed - tol))
        done += k
    return (1 + hits) / (1 + n_perm), "monte-carlo"


def expanded_alpha(n: int, alpha: float = 0.05) -> float:
    """Hesterberg's small-sample expansion of the percentile bootstrap: the tail area to use
    so the interval is as wide as a t-interval would be, 2·Φ(−sqrt(n/(n−1))·t_{n−1})."""
    if n < 2:
        return alpha
    t = t975(n - 1) if abs(alpha - 0.05) < 1e-12 else NormalDist().inv_cdf(1 - alpha / 2)
    return 2 * NormalDist().cdf(-math.sqrt(n / (n - 1)) * t)


def bootstrap_ci(values: np.ndarray, *, n_boot: int = 10000, level: float = 0.95,
                 rng: np.random.Generator | None = None) -> tuple[float, float]:
    """Expanded percentile bootstrap interval of the mean of `values` (one value per game)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return (0.0, 0.0)
    if len(values) == 1 or np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    rng = rng or np.random.default_rng(0)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(axis=1)
    a = expanded_alpha(len(values), 1 - level)
    lo, hi = np.quantile(means, [a / 2, 1 - a / 2])
    return (float(lo), float(hi))


def game_summary(pairs: list[tuple[Any, float, float]]) -> dict[str, Any]:
    a = np.array([p[1] for p in pairs])
    b = np.array([p[2] for p in pairs])
    d = b - a
    n = len(d)
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if n > 1:
        half = t975(n - 1) * sd / math.sqrt(n)
        ci = [mean - half, mean + half]
    else:
        ci = None
    return {
        "passes": n,
        "keys": [p[0] for p in pairs],
        "a": [float(x) for x in a],
        "b": [float(x) for x in b],
        "a_mean": float(a.mean()),
        "b_mean": float(b.mean()),
        "delta": mean,
        "sd": sd,
        "ci95": ci,
        "wins": int(np.sum(d > 1e-12)),
        "losses": int(np.sum(d < -1e-12)),
        "ties": int(np.sum(np.abs(d) <= 1e-12)),
        "within_noise": within_noise(d),
    }


def within_noise(d: np.ndarray) -> bool:
    """Whether a game's paired differences do not yet tell which arm is better.

    One pair: always (no spread known). All pairs equal: settled (identical play, or a
    consistent difference). Otherwise: |mean| below the half-width of the 95% t-interval."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return True
    sd = float(d.std(ddof=1))
    if sd <= 1e-12:
        return False
    return abs(float(d.mean())) < t975(len(d) - 1) * sd / math.sqrt(len(d))


NULLS = {  # what each test assumes when it says "no difference", one sentence each (ab.json, the page)
    "p_value": "each game's mean difference B − A is as likely to be +x as −x "
               "(B no better and no worse than A on games like these)",
    "ci95": "where the mean over games of B − A would fall for another draw of games like these "
            "(whole games resampled)",
    "p_value_pairs": "B changes nothing in any run of these games, so every pair's difference is as likely "
                     "+ as −",
}


def _method(kind: str, how: str, n_perm: int) -> str:
    return f"two-sided sign-flip permutation over {kind} ({how}" + (f", {n_perm} flips" if how != "exact" else "") + ")"


def compare(a: Scores, b: Scores, *, n_boot: int = 10000, n_perm: int = 20000, seed: int = 0,
            games_detail: bool = True) -> dict[str, Any]:
    """The ab.json document for scores of arm A and arm B (see the module docstring)."""
    rng = np.random.default_rng(seed)
    pairs, unpaired = pair_up(a, b)
    games = {g: game_summary(p) for g, p in pairs.items()}
    deltas = np.array([s["delta"] for s in games.values()])
    p, how = sign_flip_pvalue([np.array([d]) for d in deltas], n_perm=n_perm, rng=rng)
    p_pairs, how_pairs = sign_flip_pvalue([np.array([q[2] - q[1] for q in ps]) for ps in pairs.values()],
                                          n_perm=n_perm, rng=rng)
    lo, hi = bootstrap_ci(deltas, n_boot=n_boot, rng=rng)
    n_games = len(games)
    doc: dict[str, Any] = {
        "delta": float(deltas.mean()) if n_games else 0.0,
        "ci95": [lo, hi],
        "p_value": float(p),
        "p_value_pairs": float(p_pairs),
        "unit": "game",
        "passes": max((s["passes"] for s in games.values()), default=0),
        "a_mean": float(np.mean([s["a_mean"] for s in games.values()])) if n_games else 0.0,
        "b_mean": float(np.mean([s["b_mean"] for s in games.values()])) if n_games else 0.0,
        "n_games": n_games,
        "n_games_differing": int(np.sum(np.abs(deltas) > 1e-12)),
        "n_pairs": int(sum(s["passes"] for s in games.values())),
        "wins": int(np.sum(deltas > 1e-12)),
        "losses": int(np.sum(deltas < -1e-12)),
        "ties": int(np.sum(np.abs(deltas) <= 1e-12)),
        "pair_wins": int(sum(s["wins"] for s in games.values())),
        "pair_losses": int(sum(s["losses"] for s in games.values())),
        "pair_ties": int(sum(s["ties"] for s in games.values())),
        "unpaired": unpaired,
        "significant": bool(p < 0.05),
        "significant_pairs": bool(p_pairs < 0.05),
        "nulls": dict(NULLS),
        "method": {"delta": "B - A, mean over games of the mean paired difference",
                   "ci95": f"expanded percentile bootstrap over games, {n_boot} resamples",
                   "p_value": _method("games", how, n_perm),
                   "p_value_pairs": _method("pairs", how_pairs, n_perm),
                   "seed": seed},
    }
    if games_detail:
        doc["games"] = games
    return doc


def scores_from_runs_jsonl(lines: list[dict[str, Any]]) -> dict[str, dict[Any, float]]:
    """game -> pass -> final_score, from rows in the format of duck-traces/runs.jsonl."""
    out: dict[str, dict[Any, float]] = {}
    for row in lines:
        g, k = row["game_id"], row["pass"]
        if k in out.setdefault(g, {}):
            raise ValueError(f"{g} pass {k} appears twice")
        out[g][k] = float(row["final_score"])
    return out
