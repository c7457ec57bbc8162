"""The HTML page of an A/B experiment (`OUT/report.html` of `duck ab`): the verdict, the
config difference, a per-game forest plot and the per-game table. One self-contained file."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from duck.lab.report.blocks import Raw, esc, fmt, page, table
from duck.lab.report.plots import _matplotlib_headless, fig_png, png_data_uri


def forest_plot(doc: dict[str, Any]) -> bytes:
    """Per-game mean difference B − A with its 95% t-interval over passes, and the overall
    delta with its bootstrap interval over games at the bottom."""
    _matplotlib_headless()
    import matplotlib.pyplot as plt
    games = sorted(doc.get("games", {}).items(), key=lambda kv: kv[1]["delta"])
    n = len(games)
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * (n + 3) + 0.9))
    ys = np.arange(n, 0, -1) + 1.0
    for y, (g, s) in zip(ys, games):
        color = "#4FCC30" if s["delta"] > 0 else ("#F93C31" if s["delta"] < 0 else "#999999")
        if s.get("ci95"):
            lo, hi = s["ci95"]
            ax.plot([lo, hi], [y, y], color=color, lw=1.4)
        ax.plot([s["delta"]], [y], "o", color=color, ms=3 + 1.2 * math.sqrt(s["passes"]))
    lo, hi = doc["ci95"]
    ax.plot([lo, hi], [0.5, 0.5], color="#1E93FF", lw=3)
    ax.plot([doc["delta"]], [0.5], "D", color="#1E93FF", ms=8)
    ax.axvline(0, color="#333333", lw=0.8, ls="--")
    ax.set_yticks(list(ys) + [0.5], [f"{g.split('-')[0]} (n={s['passes']})" for g, s in games]
                  + [f"overall (p={doc['p_value']:.3g})"], fontsize=7)
    ax.set_ylim(0, n + 2)
    ax.set_xlabel("score difference B − A (percent points)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title("per game: mean paired difference, 95% t-interval over passes; "
                 "overall: bootstrap 95% over games", fontsize=8)
    fig.tight_layout()
    return fig_png(fig)


def ab_html(doc: dict[str, Any], title: str = "A/B") -> str:
    sig = doc["p_value"] < 0.05
    verdict = ("B differs from A" + (" (better)" if doc["delta"] > 0 else " (worse)")) if sig \
        else "no significant difference"
    parts = [f"<h1>A/B experiment: {esc(title)}</h1>",
             f"<p>A = <b>{esc(doc.get('a_label') or 'A')}</b>, B = <b>{esc(doc.get('b_label') or 'B')}</b>. "
             f"Differences are B − A in score percent points.</p>",
             f"<p class={'good' if sig and doc['delta'] > 0 else ('bad' if sig else 'muted')}>"
             f"<b>{esc(verdict)}</b> at the 5% level (paired sign-flip p = {doc['p_value']:.3g}).</p>"]
    rows = [["delta (B − A)", fmt(doc["delta"], 3)],
            ["95% interval (bootstrap over games)", f"[{fmt(doc['ci95'][0], 3)}, {fmt(doc['ci95'][1], 3)}]"],
            ["p-value (paired sign-flip)", f"{doc['p_value']:.4g}"],
            ["mean score A / B", f"{fmt(doc['a_mean'], 3)} / {fmt(doc['b_mean'], 3)}"],
            ["games / pairs / max passes", f"{doc['n_games']} / {doc['n_pairs']} / {doc['passes']}"],
            ["games B better / worse / tied", f"{doc['wins']} / {doc['losses']} / {doc['ties']}"],
            ["pairs B better / worse / tied", f"{doc['pair_wins']} / {doc['pair_losses']} / {doc['pair_ties']}"],
            ["runs without a partner (A / B)", f"{doc['unpaired']['a']} / {doc['unpaired']['b']}"]]
    for key, label in (("adaptive_rounds", "adaptive rounds"), ("shard", "shard"), ("seconds", "wall time (s)")):
        if doc.get(key) is not None:
            rows.append([label, doc[key]])
    parts.append("<section id=summary><h2>Summary</h2>" + table(["", "value"], rows) + "</section>")
    diff = doc.get("config_diff")
    if diff is not None:
        parts.append("<section id=config><h2>Config difference</h2>"
                     + (table(["field", "A", "B"], [[d["field"], json.dumps(d["a"]), json.dumps(d["b"])]
                                                    for d in diff]) if diff
                        else "<p class=muted>the two configs are identical (an A/A run)</p>") + "</section>")
    parts.append("<section id=forest><h2>Per-game forest plot</h2>"
                 f"<img class=plot alt=\"forest plot\" src=\"{png_data_uri(forest_plot(doc))}\"></section>")
    grows = []
    for g, s in sorted(doc.get("games", {}).items()):
        ci = s.get("ci95")
        grows.append([g, s["passes"], fmt(s["a_mean"]), fmt(s["b_mean"]),
                      Raw(f"<span class={'good' if s['delta'] > 0 else ('bad' if s['delta'] < 0 else 'muted')}>"
                          f"{fmt(s['delta'])}</span>"),
                      f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "–",
                      f"{s['wins']}/{s['losses']}/{s['ties']}", "yes" if s["within_noise"] else "no",
                      " ".join(fmt(x, 2) for x in s["a"]), " ".join(fmt(x, 2) for x in s["b"])])
    parts.append("<section id=per-game><h2>Per game</h2>"
                 + table(["game", "passes", "A mean", "B mean", "B − A", "95% t-interval", "B won/lost/tied",
                          "within noise", "A by pass", "B by pass"], grows) + "</section>")
    method = doc.get("method", {})
    parts.append("<section id=method><h2>Method</h2><ul>"
                 + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in method.items())
                 + "<li>assumptions: see the docstring of duck/stats.py; calibration: "
                   "<code>python -m duck.bench calibration</code></li></ul></section>")
    return page(f"duck ab: {title}", "\n".join(parts))
