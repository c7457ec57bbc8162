"""The HTML page of an A/B experiment (`OUT/report.html` of `duck ab`): the verdict, the
config difference, what each number tests (its null in one sentence), a per-game forest plot
and the per-game table. One self-contained file."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from duck.lab.report.blocks import Raw, esc, fmt, page, table
from duck.lab.report.plots import fig_png, figure, png_data_uri


def forest_plot(doc: dict[str, Any]) -> bytes:
    """Per-game mean difference B − A with its 95% t-interval over passes, and the overall
    delta with its bootstrap interval over games at the bottom."""
    games = sorted(doc.get("games", {}).items(), key=lambda kv: kv[1]["delta"])
    n = len(games)
    fig = figure(7.5, 0.28 * (n + 3) + 0.9)
    ax = fig.subplots()
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
                  + [f"overall (p={doc['p_value']:.3g}, over games)"], fontsize=7)
    ax.set_ylim(0, n + 2)
    ax.set_xlabel("score difference B − A (percent points)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title("per game: mean paired difference, 95% t-interval over passes; "
                 "overall: bootstrap 95% over games", fontsize=8)
    fig.tight_layout()
    return fig_png(fig)


def verdict(doc: dict[str, Any]) -> tuple[str, str]:
    """The page's headline and its class: a banner only when the test over games says so."""
    p, n = doc["p_value"], doc.get("n_games", 0)
    differ = doc.get("n_games_differing")
    of = f"{differ} of {n} games differ" if differ is not None else f"{n} games"
    if p < 0.05:
        side = "better" if doc["delta"] > 0 else "worse"
        return (f"B differs from A ({side}) at the 5% level: p = {p:.3g}, sign-flip over games ({of})",
                "good" if doc["delta"] > 0 else "bad")
    return f"no significant difference over games: p = {p:.3g}, sign-flip over games ({of})", "muted"


def _tests_section(doc: dict[str, Any]) -> str:
    """What each number tests, its null in one sentence (old ab.json files: the pair-level p
    was their only one)."""
    nulls = doc.get("nulls") or {}
    items = [("delta", f"{fmt(doc['delta'], 3)}", "the mean over games of each game's mean paired difference "
              "B − A (every game weighs the same, like the official score)."),
             ("p-value, games (the decision)", f"{doc['p_value']:.4g}",
              "Null: " + nulls.get("p_value", "–") + "; the game means' signs are flipped at random. "
              "Asks whether B will differ on games like these."),
             ("95% interval", f"[{fmt(doc['ci95'][0], 3)}, {fmt(doc['ci95'][1], 3)}]",
              nulls.get("ci95", "bootstrap over games") + "; read it as the likely size of the change.")]
    if doc.get("p_value_pairs") is not None:
        items.append(("p-value, pairs (secondary)", f"{doc['p_value_pairs']:.4g}",
                      "Null: " + nulls.get("p_value_pairs", "–") + ". It asks whether B did anything on "
                      "these very games; a game repeating one difference on every pass counts once per pass, "
                      "so it is not the verdict."))
    return ("<section id=tests><h2>What each number tests</h2><ul>"
            + "".join(f"<li><b>{esc(k)}</b> = {esc(v)}: {esc(t)}</li>" for k, v, t in items)
            + "</ul><p class=muted>Fewer than 6 differing games can never reach p &lt; 0.05 (2/2<sup>5</sup> "
              "= 0.0625). Assumptions and the A/A calibration: the docstring of duck/lab/stats.py; "
              "<code>duck bench calibration</code>.</p></section>")


def _noise(s: dict[str, Any]) -> str:
    if s["wins"] == s["losses"] == 0:
        return "tied"
    return "yes" if s["within_noise"] else "no"


def ab_html(doc: dict[str, Any], title: str = "A/B") -> str:
    text, cls = verdict(doc)
    parts = [f"<h1>A/B experiment: {esc(title)}</h1>",
             f"<p>A = <b>{esc(doc.get('a_label') or 'A')}</b>, B = <b>{esc(doc.get('b_label') or 'B')}</b>. "
             f"Differences are B − A in score percent points.</p>",
             f"<p class={cls} id=verdict><b>{esc(text)}</b>.</p>"]
    rows = [["delta (B − A)", fmt(doc["delta"], 3)],
            ["95% interval (bootstrap over games)", f"[{fmt(doc['ci95'][0], 3)}, {fmt(doc['ci95'][1], 3)}]"],
            ["p-value, games (sign-flip over games: the decision)", f"{doc['p_value']:.4g}"]]
    if doc.get("p_value_pairs") is not None:
        rows.append(["p-value, pairs (sign-flip over pairs, sharp null: secondary)",
                     f"{doc['p_value_pairs']:.4g}"])
    rows += [["mean score A / B", f"{fmt(doc['a_mean'], 3)} / {fmt(doc['b_mean'], 3)}"],
             ["games / pairs / max passes", f"{doc['n_games']} / {doc['n_pairs']} / {doc['passes']}"],
             ["games B better / worse / tied", f"{doc['wins']} / {doc['losses']} / {doc['ties']}"],
             ["pairs B better / worse / tied",
              f"{doc['pair_wins']} / {doc['pair_losses']} / {doc['pair_ties']}"],
             ["runs without a partner (A / B)", f"{doc['unpaired']['a']} / {doc['unpaired']['b']}"]]
    for key, label in (("adaptive_rounds", "adaptive rounds"), ("shard", "shard"),
                       ("seconds", "wall time (s)")):
        if doc.get(key) is not None:
            rows.append([label, doc[key]])
    parts.append("<section id=summary><h2>Summary</h2>" + table(["", "value"], rows) + "</section>")
    parts.append(_tests_section(doc))
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
                      f"{s['wins']}/{s['losses']}/{s['ties']}", _noise(s),
                      " ".join(fmt(x, 2) for x in s["a"]), " ".join(fmt(x, 2) for x in s["b"])])
    parts.append("<section id=per-game><h2>Per game</h2>"
                 + table(["game", "passes", "A mean", "B mean", "B − A", "95% t-interval", "B won/lost/tied",
                          "within noise", "A by pass", "B by pass"], grows)
                 + "<p class=muted>within noise: whether the passes do not yet tell which arm is better on "
                   "this game (adaptive passes go to these); tied: every pass gave both arms the same "
                   "score.</p></section>")
    method = doc.get("method", {})
    parts.append("<section id=method><h2>Method</h2><ul>"
                 + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in method.items())
                 + "<li>assumptions: see the docstring of <code>duck/lab/stats.py</code>; calibration: "
                   "<code>duck bench calibration</code></li></ul></section>")
    return page(f"duck ab: {title}", "\n".join(parts))
