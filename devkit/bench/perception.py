"""`duck bench perception`: animation-only information in the public games, and the images' cost.

The Duck's recorded play (../shared/duck-traces, the first pass of each game whose action lists
are complete) is replayed on the public games (no model needed; games are deterministic). Per
action: animated or not, with transient cells, informative (duck.game.change.informative_frames:
what the turn's mid-animation images show), and by the field's rule alone (FIELD §3). Per turn
(the Duck's turns), the images the turn message would carry at each setting (duck.agent.turn's
rules, up to K mid frames chosen by duck.game.change.pick_frames) and their tokens on Qwen3-VL's
geometry (duck.llm.vision), scaled to a 100-turn game; `ms_per_turn`: the median time to compute
one turn's facts and render its images.

    duck bench perception [--games environment_files] [--traces ../shared/duck-traces]
                                    [--turns 100] [--only sp80,tn36]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from duck.game.actions import parse_display
from duck.game.change import Step, informative_frames, inside, pick_frames, transient
from duck.llm.vision import board_tokens
from duck.paths import SHARED

# (name, board scale, diff, death images, K mid frames, their scale); the default config is "default".
SETTINGS = [
    ("duck: board 4x", 4, False, False, 0, 4),
    ("board 10x", 10, False, False, 0, 4),
    ("+ diff", 10, True, False, 0, 4),
    ("+ death", 10, True, True, 0, 4),
    ("default: + mid frames K=4 at 4x", 10, True, True, 4, 4),
    ("+ mid frames K=2 at 4x", 10, True, True, 2, 4),
    ("+ mid frames K=4 at 10x", 10, True, True, 4, 10),
]


def _pass(traces: Path, game: str) -> tuple[int, list[dict[str, Any]]] | None:
    from devkit.stub.traces import load_trace, recorded_actions
    for p in range(20):
        try:
            turns = load_trace(traces, game, p)
        except (FileNotFoundError, ValueError):
            continue
        if recorded_actions(turns) is not None:
            return p, turns
    return None


def _per_setting(shown: list[Any], k2: int) -> dict[str, list[tuple[int, int]]]:
    """The images (count, scale) each setting's turn would carry, from the default turn's
    images (duck.agent.turn.turn_images: the board, a diff, the death pair, mid frames):
    the settings that are no longer switches are what the default turn leaves out. `k2`:
    the mid frames pick_frames finds with K=2."""
    kinds = {"board": 0, "diff": 0, "death": 0, "mid": 0}
    for i, image in enumerate(shown):
        c = image.caption
        kind = ("board" if i == 0 else "mid" if c.startswith("mid-animation") else
                "death" if "GAME_OVER" in c or c.startswith("the fatal frame") else "diff")
        kinds[kind] += 1
    out = {}
    for name, scale, diff, death, k, k_scale in SETTINGS:
        mids = 0 if not k else kinds["mid"] if k == 4 else k2
        out[name] = [(1, scale), (kinds["diff"] if diff else 0, scale), (kinds["death"] if death else 0, scale),
                     (mids, k_scale)]
    return out


def measure_game(games: str, traces: Path, game_id: str, max_turns: int, border: int = 4) -> dict[str, Any] | None:
    """One game's actions and, per setting, the images its turns carry: made by the agent's
    own call_facts and turn_images (duck.agent.turn) from each turn's acting call."""
    from duck.agent.turn import call_facts, turn_images
    from duck.game.source import GameSource
    found = _pass(traces, game_id)
    if found is None:
        return None
    pass_, turns = found
    game = GameSource.offline(games).make(game_id)
    obs = game.reset()
    acts = {"actions": 0, "animated": 0, "transient": 0, "informative": 0, "field_rule": 0, "frames": 0}
    per_setting = {name: [0, 0] for name, *_ in SETTINGS}  # images, tokens
    n_turns, ms, actions = 0, [], 0
    for t in turns[:max_turns]:
        for a in t.get("pre_turn_auto_actions") or []:
            obs = game.step(parse_display(a))
            actions += 1
        played = [parse_display(a) for c in t.get("calls", []) for a in c.get("actions") or []]
        n_turns += 1
        before, level, steps = obs.grid, obs.levels_completed, []
        for a in played:
            b = obs.grid
            obs = game.step(a)
            steps.append(Step(str(a), b, tuple(obs.frames), obs.state, obs.levels_completed))
            acts["actions"] += 1
            acts["frames"] += len(obs.frames)
            if len(obs.frames) > 1:
                acts["animated"] += 1
                acts["transient"] += bool(transient(b, obs.frames, border).any())
                acts["informative"] += bool(informative_frames(b, obs.frames, border))
                mask = inside(b.shape, border)
                final = int(((obs.grid != b) & mask).sum())
                acts["field_rule"] += any(int(((np.asarray(f) != b) & mask).sum()) > final for f in obs.frames[:-1])
        actions += len(played)
        session = SimpleNamespace(obs=obs, game=SimpleNamespace(actions=actions))
        call = SimpleNamespace(actions=[str(a) for a in played], steps=steps)
        t0 = time.perf_counter()
        facts = call_facts(call, session, level, before) if played else None
        shown = turn_images(session, facts, 1 << 30)
        if played:  # the harness's cost per turn: the facts and the default turn's PNGs
            for image in shown:
                image.png()
            ms.append((time.perf_counter() - t0) * 1000)
        k2 = len(pick_frames(steps, 2, border)) if played else 0
        for name, parts in _per_setting(shown, k2).items():
            per_setting[name][0] += sum(n for n, _ in parts)
            per_setting[name][1] += sum(n * board_tokens(scale) for n, scale in parts)
        if obs.state == "WIN":
            break
    scale = 100 / max(1, n_turns)
    return {"game": game_id, "pass": pass_, "turns": n_turns, **acts,
            "per_100_turns": {k: {"images": round(v[0] * scale, 1), "tokens": round(v[1] * scale)}
                              for k, v in per_setting.items()},
            "ms_per_turn": round(statistics.median(ms), 2) if ms else None}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("actions", "animated", "transient", "informative", "field_rule")
    totals = {k: sum(r[k] for r in rows) for k in keys}
    with_any = {k: sum(1 for r in rows if r[k]) for k in ("animated", "transient", "informative", "field_rule")}
    per = {}
    for name, *_ in SETTINGS:
        imgs = [r["per_100_turns"][name]["images"] for r in rows]
        toks = [r["per_100_turns"][name]["tokens"] for r in rows]
        per[name] = {"images_median": statistics.median(imgs), "tokens_median": statistics.median(toks),
                     "images_max": max(imgs), "tokens_max": max(toks)}
    ms = [r["ms_per_turn"] for r in rows if r["ms_per_turn"] is not None]
    return {"games": len(rows), "actions": totals, "games_with_any": with_any, "per_100_turns": per,
            "ms_per_turn_median": statistics.median(ms) if ms else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="duck bench perception", description=__doc__.splitlines()[0])
    ap.add_argument("--games", default="environment_files")
    ap.add_argument("--traces", default=str(SHARED / "duck-traces"))
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated game prefixes")
    args = ap.parse_args(argv)
    from duck.game.source import GameSource
    if not any(Path(args.games).rglob("metadata.json")):
        print(json.dumps({"error": f"no games under {args.games} (fetch the public games: README)"}))
        return 2
    ids = GameSource.offline(args.games).game_ids([p for p in args.only.split(",") if p] or None)
    rows = [r for g in ids if (r := measure_game(args.games, Path(args.traces), g, args.turns)) is not None]
    print(json.dumps({"settings": [s[0] for s in SETTINGS], "summary": summarize(rows) if rows else None,
                      "per_game": rows}, indent=1))
    return 0
