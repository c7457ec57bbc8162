"""The comparison behind the scheduler's default: policies x slots x curve sets, same draws.

For every curve set (the Duck's recorded runs in tokens, extended; the synthetic field-like
games), every slot count S and every seed, one set of games is drawn and every policy plays
it; the table gives the mean over seeds with a 95% interval, and each policy's paired
difference from `field` (the published baseline). A slot count beyond what the serving
profile's memory plan fits at its full context gets the largest context that fits
(`context_for_slots`): more slots, shorter contexts, more trims. The curves themselves do not
depend on the context (the simulator cannot know what a shorter history costs in play; the
field saw it cost a lot), so larger S is flattered here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import duck.config.profiles as profiles

from scheduler.policy import Policy
from .simulate import Outcome, Scenario, paired, simulate, summarize

CURVE_SETS_ASSUME = {
    "duck": "the Duck's 250 recorded runs (Qwen3.6-27B, 45 min each), chars converted to tokens "
            "(devkit.simulator.traces); past the recorded end, a token hazard model fitted on them "
            "(devkit.simulator.extend.fit_tokens) decides the next level and the run's own turns its sizes",
    "synthetic": "field-like games (devkit.simulator.synthetic): per-level token medians 27K/51K/49K/56K/56K/67K, "
                 "557/725 attempts complete, completion chance halving at ~65K tokens, actions 0.75x "
                 "the human baseline; turn sizes from the Duck's turns",
}


def context_for_slots(slots: int, profile: str = profiles.DEFAULT_PROFILE,
                      step: int = 1024) -> tuple[int, int]:
    """(context tokens, output cap) per game for `slots` games: the profile's own when it fits,
    else the largest multiple of `step` whose memory plan has no problem."""
    p = profiles.plan(profile, slots=slots)
    if not p.problems:
        return p.context_tokens, p.output_tokens
    lo, hi = step, p.window
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if profiles.plan(profile, slots=slots, context_tokens=mid).problems:
            hi = mid
        else:
            lo = mid
    q = profiles.plan(profile, slots=slots, context_tokens=lo)
    return q.context_tokens, q.output_tokens


def grid(curve_sets: dict[str, Callable[[int, int], Sequence]], policies: Callable[[int], dict[str, Policy]],
         scenario: Scenario, slots: Sequence[int], seeds: Sequence[int]) -> dict:
    """{curve set: {S: {policy: [Outcome per seed]}}}; `curve_sets[name](seed, n_games)` draws
    a fresh set (trajectories are consumed by a run), `policies(S)` makes them for S slots."""
    out: dict = {}
    for cs, draw in curve_sets.items():
        out[cs] = {}
        for s in slots:
            ctx, cap = context_for_slots(s)
            sc = replace(scenario, slots=s, context_tokens=ctx, output_tokens=cap)
            pols = policies(s)
            res: dict[str, list[Outcome]] = {n: [] for n in pols}
            for seed in seeds:
                for name, pol in pols.items():
                    res[name].append(simulate(draw(seed, sc.n_games), pol, sc))
            out[cs][s] = (sc, res)
    return out


def report(results: dict, baseline: str = "field") -> dict:
    """The JSON document: per curve set and S, every policy's summary and its paired
    difference from `baseline`; per S, the policies that beat it on every curve set (the 95%
    interval of the paired difference above 0), and those that do at every S."""
    doc: dict = {}
    beats: dict[str, list[bool]] = {}
    by_slots: dict[int, dict[str, list[bool]]] = {}
    for cs, by_s in results.items():
        doc[cs] = {"assumes": CURVE_SETS_ASSUME.get(cs, "")}
        for s, (sc, res) in by_s.items():
            row = {"context_tokens": sc.context_tokens}
            for name, outs in res.items():
                row[name] = summarize(outs, sc)
                if name != baseline and baseline in res:
                    d = paired(outs, res[baseline])
                    row[name][f"minus_{baseline}"] = d
                    beats.setdefault(name, []).append(d["score"]["ci95"][0] > 0)
                    by_slots.setdefault(s, {}).setdefault(name, []).append(d["score"]["ci95"][0] > 0)
            doc[cs][f"S={s}"] = row
    doc[f"beats_{baseline}_on_every_curve_set"] = {
        f"S={s}": sorted(n for n, b in per.items() if len(b) == len(results) and all(b))
        for s, per in by_slots.items()}
    doc[f"beats_{baseline}_everywhere"] = sorted(n for n, b in beats.items() if b and all(b))
    return doc


def markdown(doc: dict, policies: Sequence[str]) -> str:
    """The table for the notes: score, levels, idle slot share and unplayed games, mean [95% CI]."""
    lines = ["| curves | S | policy | score % | levels / 110 | idle slots | unplayed | vs field (score) |",
             "|---|---:|---|---|---|---|---|---|"]
    for cs, by_s in doc.items():
        if not isinstance(by_s, dict) or "assumes" not in by_s:
            continue
        for key, row in by_s.items():
            if not key.startswith("S="):
                continue
            for name in policies:
                r = row.get(name)
                if r is None:
                    continue

                def fmt(x, d=2):
                    return f"{x['mean']:.{d}f} [{x['ci95'][0]:.{d}f}, {x['ci95'][1]:.{d}f}]"
                vs = fmt(r["minus_field"]["score"]) if "minus_field" in r else "—"
                lines.append(f"| {cs} | {key[2:]} | {name} | {fmt(r['expected_score'])} | "
                             f"{fmt(r['expected_levels'], 1)} | {r['idle_slot_share']['mean']:.3f} | "
                             f"{r['unplayed_games']['mean']:.1f} | {vs} |")
    return "\n".join(lines)
