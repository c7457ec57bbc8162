"""`duck bench plan`: how fast the world-model tools' `plan` searches a small abstraction.

The fixed abstraction is a box-pushing room (10x10 floor, two boxes, a wall; state = (player,
frozenset of boxes), four keys), a typical simulator a model writes, whose goal can never be
reached, so the search runs to its state budget (`--states`, default 100,000). It runs where
the model's code runs: inside a real kernel worker (`duck.sandbox.host.Kernel` on a bundled
game, the tools published), in one call. Prints, as JSON: `expansions_per_s` (states expanded
per second), `states`, `expanded`, `seconds`, and the same search in this process
(`in_process`) for comparison. The bar of issue 16 is 20,000 expansions per second.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

SIMULATOR = '''
ROOM = ["############",
        "#..........#",
        "#..........#",
        "#...##.....#",
        "#..........#",
        "#..........#",
        "#......#...#",
        "#..........#",
        "#..........#",
        "#..........#",
        "#..........#",
        "############"]
WALLS = frozenset((r, c) for r, row in enumerate(ROOM) for c, ch in enumerate(row) if ch == "#")
MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}

def step(s, a):
    (r, c), boxes = s
    dr, dc = MOVES[a]
    n = (r + dr, c + dc)
    if n in WALLS:
        return None
    if n in boxes:
        b = (n[0] + dr, n[1] + dc)
        if b in WALLS or b in boxes:
            return None
        boxes = (boxes - {n}) | {b}
    return (n, boxes)

def is_goal(s):
    return False  # never: the search runs to its budget

START = ((1, 1), frozenset({(4, 4), (6, 5)}))
'''

GAMES = Path(__file__).resolve().parents[2] / "tests" / "games"


def in_process(states: int) -> dict:
    from duck.sandbox.tools.search import plan
    ns: dict = {}
    exec(SIMULATOR, ns)
    p = plan(ns["step"], ns["START"], ns["is_goal"], list(ns["MOVES"]), max_states=states, max_seconds=120)
    return {"expansions_per_s": round(p["expanded"] / p["seconds"]), "states": p["states"],
            "expanded": p["expanded"], "seconds": p["seconds"], "reason": p["reason"]}


def in_kernel(states: int) -> dict:
    from duck.game.source import GameSource
    from duck.play.session import recorded_session
    from duck.sandbox.host import Kernel

    source = GameSource.offline(GAMES)
    with tempfile.TemporaryDirectory() as d:
        session = recorded_session(source, source.game_ids(["zs01"])[0], Path(d) / "bench.jsonl", 10)
        with Kernel(session, tools=True) as kernel:
            code = SIMULATOR + (f"p = plan(step, START, is_goal, list(MOVES), max_states={states}, max_seconds=25)\n"
                                "result = {k: p[k] for k in ('expanded', 'states', 'seconds', 'reason')}")
            r = kernel.run(code, timeout_s=30)
    if r.kind != "ok":
        raise SystemExit(f"the kernel call failed: {r.kind} {r.error}")
    p = r.result
    return {"expansions_per_s": round(p["expanded"] / p["seconds"]), "states": p["states"],
            "expanded": p["expanded"], "seconds": p["seconds"], "reason": p["reason"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="duck bench plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--states", type=int, default=100_000, help="the search's state budget")
    args = ap.parse_args(argv)
    out = in_kernel(args.states)
    out["in_process"] = in_process(args.states)
    print(json.dumps(out, indent=1))
    return 0
