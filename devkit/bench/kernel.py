"""`duck bench kernel`: cost of one `action()` call as the history grows.

The claim to check (DESIGN §3): an action costs the same at step 1,000 as at step 10,
because each observation reaches the kernel once, as a delta. For each history length
(10, 100, 500, 1,000 actions) one kernel's game is first played up to that length by the
host (RESET after GAME_OVER); then snippets time `action()` calls from inside each kernel,
in interleaved rounds: host step, engine, record line, result, delta over the pipe, new
frame objects and the animation summary included.

Prints JSON: {"median_ms": {"10": ..., "100": ..., "500": ..., "1000": ...},
"ratio_1000_10": ..., "game": ..., "startup_ms": ...}. `startup_ms`: the median time from
starting a worker (and its confinement) to the answer of its first snippet, over 10 starts.
Options: --game ID, --games DIR, --samples N, --lengths N... (the ratio is then longest /
shortest), --starts N.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from duck.paths import BUNDLED_GAMES, PUBLIC_GAMES
from duck.game.actions import MODEL_NAMES, RESET, Action
from duck.game.source import GameSource
from duck.sandbox.host import Kernel
from duck.play.session import recorded_session

LENGTHS = (10, 100, 500, 1000)

SNIPPET = """
import time
_ts = []
for _i in range({n}):
    _t = time.perf_counter()
    _r = action({acts}[_i % {k}])
    _ts.append((time.perf_counter() - _t) * 1000)
    if not _r.get('executed') or _r.get('game_over') or _r.get('level_completed') or _r.get('done'):
        break
result = _ts
"""


def _pick_game(source: GameSource, wanted: str | None) -> str:
    ids = [g.game_id for g in source.games()]
    if wanted:
        return next(i for i in ids if i.startswith(wanted))
    return next((i for i in ids if i.startswith("ls20")), ids[0])


def _cycle(available: list[int]) -> tuple[list[Action], list[object]]:
    """Actions that keep a game busy: two opposite moves if it has them, else clicks."""
    simple = [a for a in (1, 2, 3, 4, 5) if a in available]
    if len(simple) >= 2:
        acts = [Action(i) for i in (simple[:2] if {1, 2} <= set(simple) else simple)]
    else:
        acts = [Action.at(r, c) for r, c in [(10, 10), (50, 50), (32, 32), (20, 40)]]
    return acts, [MODEL_NAMES.item(a) for a in acts]


WARM_UP = """
import time
for _f in (current_frame, current_frame):
    _f.segmentation, _f.ascii, _f.grid.sum()
"""


def _warm_up(source: GameSource, gid: str, acts: list[Action], kernel: Kernel) -> None:
    """First calls pay for imports and caches; pay them before the length-10 sample (on a
    second copy of the game, so the measured history stays short)."""
    other = source.make(gid)
    for j in range(30):
        other.step(RESET if other.obs.state != "NOT_FINISHED" else acts[j % len(acts)])
    kernel.run(WARM_UP)


def _filled(source: GameSource, gid: str, acts: list[Action], length: int, tmp: str) -> Kernel:
    """A kernel whose game has `length` actions of history (RESET after GAME_OVER)."""
    session = recorded_session(source, gid, Path(tmp) / f"bench-{length}.jsonl")
    game = session.game
    kernel = Kernel(session)
    kernel.start()
    _warm_up(source, gid, acts, kernel)
    j = 0
    while game.actions < length:
        kernel.act(RESET if session.obs.state != "NOT_FINISHED" else acts[j % len(acts)])
        j += 1
    kernel.run("pass")  # the worker takes the host's actions as one delta
    return kernel


def measure(games_dir: str, game_id: str | None = None, samples: int = 60, rounds: int = 12,
            lengths: tuple[int, ...] = LENGTHS, starts: int = 10) -> dict:
    """Median ms per action() at each history length. The lengths are measured in
    interleaved rounds, so a busy machine slows all of them alike."""
    source = GameSource.offline(games_dir)
    gid = _pick_game(source, game_id)
    host_acts, model_acts = _cycle(source.make(gid).obs.available_actions)
    per_round = max(1, samples // rounds)
    times: dict[int, list[float]] = {n: [] for n in lengths}
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {n: _filled(source, gid, host_acts, n, tmp) for n in lengths}
        try:
            while any(len(t) < samples for t in times.values()):
                for n, kernel in kernels.items():
                    if len(times[n]) >= samples:
                        continue
                    if kernel.session.obs.state != "NOT_FINISHED":
                        kernel.act(RESET)
                        kernel.run("pass")
                    res = kernel.run(SNIPPET.format(n=per_round, acts=repr(model_acts), k=len(model_acts)))
                    got = res.result if isinstance(res.result, list) else []
                    if not got:
                        raise RuntimeError(f"no action could be timed: {res.text[:500]}")
                    times[n] += got
            startup = _startup(kernels[lengths[0]], starts)
        finally:
            for kernel in kernels.values():
                kernel.close()
                kernel.session.writer.close()
    medians = {str(n): round(statistics.median(t), 3) for n, t in times.items()}
    longest, shortest = str(max(lengths)), str(min(lengths))
    return {"median_ms": medians,
            f"ratio_{longest}_{shortest}": round(medians[longest] / medians[shortest], 3), "game": gid,
            "samples": samples, "startup_ms": startup}


def _startup(kernel: Kernel, n: int = 10) -> float:
    """Median ms of a restart of the worker up to the answer of its first snippet."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        kernel.restart()
        kernel.run("pass")
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 1)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="duck bench kernel", description=__doc__.split("\n")[0])
    p.add_argument("--games", default=None, help="environments folder (default: public games if "
                   "present, else tests/games)")
    p.add_argument("--game", default=None, help="game id or prefix (default: ls20 or the first)")
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS),
                   help="history lengths (default: %(default)s)")
    p.add_argument("--starts", type=int, default=10, help="worker starts timed for startup_ms")
    args = p.parse_args(argv)
    if min(args.lengths) < 1 or args.starts < 1 or args.samples < 1:
        p.error("--lengths, --starts and --samples must be at least 1")
    games = args.games
    if games is None:
        public = PUBLIC_GAMES
        games = str(public if public.is_dir() and any(public.iterdir()) else BUNDLED_GAMES)
    print(json.dumps(measure(games, args.game, args.samples, lengths=tuple(sorted(set(args.lengths))),
                             starts=args.starts)))
    return 0
