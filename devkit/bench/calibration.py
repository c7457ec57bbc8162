"""A/A calibration of duck.lab.stats on the Duck's traces: `duck bench calibration`.

The Duck played every public game in several passes (../shared/duck-traces/runs.jsonl). Split
each game's passes at random into two disjoint halves, call one A and the other B, pair them
pass by pass, and run the A/B statistics. Both halves come from the same agent, so a sound test
rejects "no difference" at the 5% level in at most ~5% of the splits. Each design reports the
decision test (`rejection_rate`: the sign-flip over games) and the pair-level one
(`rejection_rate_pairs`). Designs: `fixed-k` (k = 3 and 5 passes per arm), `adaptive` (3 passes,
then one more per round for the games still within noise, up to 5: `duck ab --max-passes 5`)
and `power` (fixed 3 and 5 with +delta added to every score of B: what size of change 25 games
can see). The results: docs/ab.md, "Calibration".

Prints one JSON document (rejection rates at alpha, and how often the bootstrap interval
excludes 0); `--plot PNG` also draws the p-value histograms (uniform under the null).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from duck.paths import SHARED
from duck.lab.stats import compare, scores_from_runs_jsonl, within_noise

DEFAULT_RUNS = SHARED / "duck-traces" / "runs.jsonl"


def load(path: Path) -> dict[str, list[float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    scores = scores_from_runs_jsonl(rows)
    return {g: [v for _, v in sorted(d.items())] for g, d in scores.items()}


def split(scores: dict[str, list[float]], k: int, rng: np.random.Generator,
          shift: float = 0.0) -> tuple[dict, dict, dict, dict]:
    """A and B (k pairs per game), and the passes left for each arm (for adaptive rounds)."""
    a, b, rest_a, rest_b = {}, {}, {}, {}
    for g, vals in scores.items():
        order = rng.permutation(len(vals))
        half = len(vals) // 2
        ia, ib = order[:half], order[half:2 * half]
        a[g] = {i: vals[j] for i, j in enumerate(ia[:k])}
        b[g] = {i: vals[j] + shift for i, j in enumerate(ib[:k])}
        rest_a[g] = [vals[j] for j in ia[k:]]
        rest_b[g] = [vals[j] + shift for j in ib[k:]]
    return a, b, rest_a, rest_b


def run_design(scores, *, k: int, reps: int, rng, alpha: float, n_perm: int, n_boot: int,
               adaptive_max: int = 0, shift: float = 0.0) -> dict:
    pvals, ppairs, ci_excl, passes = [], [], 0, []
    for _ in range(reps):
        a, b, rest_a, rest_b = split(scores, k, rng, shift)
        if adaptive_max:
            while True:
                noisy = [g for g in a if len(a[g]) < adaptive_max and rest_a[g]
                         and within_noise(np.array([b[g][i] - a[g][i] for i in a[g]]))]
                if not noisy:
                    break
                for g in noisy:
                    i = len(a[g])
                    a[g][i], b[g][i] = rest_a[g].pop(0), rest_b[g].pop(0)
        doc = compare(a, b, n_boot=n_boot, n_perm=n_perm, seed=int(rng.integers(1 << 31)),
                      games_detail=False)
        pvals.append(doc["p_value"])
        ppairs.append(doc["p_value_pairs"])
        lo, hi = doc["ci95"]
        ci_excl += not (lo <= 0.0 <= hi)
        passes.append(doc["n_pairs"] / max(1, doc["n_games"]))
    p = np.array(pvals)
    return {"k": k, "adaptive_max": adaptive_max or None, "shift": shift, "reps": reps,
            "rejection_rate": float(np.mean(p < alpha)),
            "rejection_rate_pairs": float(np.mean(np.array(ppairs) < alpha)),
            "ci95_excludes_0_rate": ci_excl / reps,
            "mean_pairs_per_game": float(np.mean(passes)),
            "p_quantiles": {q: float(np.quantile(p, float(q))) for q in ("0.05", "0.25", "0.5", "0.75")},
            "_p": p}


def plot(results: dict[str, dict], path: Path, alpha: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names), 3.0), squeeze=False)
    for ax, name in zip(axes[0], names):
        r = results[name]
        ax.hist(r["_p"], bins=20, range=(0, 1), color="#1E93FF", edgecolor="white")
        ax.axvline(alpha, color="#F93C31", lw=1)
        ax.set_title(f"{name}\nreject@{alpha:g}: {r['rejection_rate']:.3f}", fontsize=9)
        ax.set_xlabel("p-value", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="duck bench calibration", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="runs.jsonl of the Duck's traces")
    ap.add_argument("--reps", type=int, default=1000, help="random splits per design")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--perm", type=int, default=2000, help="sign flips per test (Monte Carlo)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples per test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shifts", type=float, nargs="*", default=[0.3, 1.0],
                    help="effects added to B for the power lines")
    ap.add_argument("--plot", type=Path, default=None, help="write a PNG of the p-value histograms")
    args = ap.parse_args(argv)
    if small := next((f for f in ("reps", "perm", "boot") if getattr(args, f) < 1), None):
        ap.error(f"--{small} must be at least 1")
    if not args.runs.exists():
        raise SystemExit(f"{args.runs} not found (the Duck's traces; pass --runs)")
    scores = load(args.runs)
    n_pass = min(len(v) for v in scores.values())
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    common = dict(reps=args.reps, rng=rng, alpha=args.alpha, n_perm=args.perm, n_boot=args.boot)
    half = n_pass // 2
    results = {}
    for k in sorted({min(3, half), half}):
        results[f"A/A fixed-{k}"] = run_design(scores, k=k, **common)
    if half > 3:
        results[f"A/A adaptive 3..{half}"] = run_design(scores, k=3, adaptive_max=half, **common)
    for s in args.shifts:
        for k in sorted({min(3, half), half}):
            results[f"power +{s:g} fixed-{k}"] = run_design(scores, k=k, shift=s, **common)
    if args.plot:
        plot({n: r for n, r in results.items() if n.startswith("A/A")}, args.plot, args.alpha)
    doc = {"runs": str(args.runs), "games": len(scores), "passes_per_game": n_pass,
           "alpha": args.alpha, "decision": "p_value: sign-flip over games (rejection_rate); "
           "p_value_pairs: over pairs, the sharp null (rejection_rate_pairs)", "seconds": round(time.time() - t0, 1),
           "designs": {n: {k: v for k, v in r.items() if k != "_p"} for n, r in results.items()}}
    print(json.dumps(doc, indent=1))
    return 0
