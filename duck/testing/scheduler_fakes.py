"""Test doubles for the scheduler: synthetic recorded runs, and a scripted game worker.

Why here and not under tests/: the simulator and the runner are tested from several test
files, and a worker that honours the play_game contract on a virtual clock is also the
simplest way to try a policy by hand (`run_schedule(..., worker=ScriptedWorker(...))`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from scheduler.curves import game_score

# game id -> (baselines, per pass: list of (level completion time, actions on that level))
SYNTHETIC: dict[str, tuple[list[int], list[list[tuple[float, int]]]]] = {
    "aa01-00000001": ([10, 20, 30], [[(200.0, 12), (900.0, 25)], [(400.0, 9)], [(1500.0, 40)], []]),
    "bb02-00000002": ([15, 15], [[], [], [(2000.0, 60)], []]),
    "cc03-00000003": (
        [5, 5, 5, 5],
        [[(60.0, 5), (300.0, 6), (700.0, 8)], [(100.0, 7)], [(150.0, 5), (2600.0, 30)], [(90.0, 6)]],
    ),
}
TURN_S = 50.0
END_S = 2700.0
RATE = 0.05  # actions per second between levels


def write_synthetic(dirpath: Path) -> tuple[Path, Path]:
    """Write runs.jsonl and public-games.json for SYNTHETIC; returns their paths."""
    dirpath = Path(dirpath)
    lines, games = [], []
    for gid, (baselines, passes) in SYNTHETIC.items():
        games.append({"game_id": gid, "baseline_actions": baselines})
        for p, levels in enumerate(passes):
            comps, apl, done = [], [0] * len(baselines), 0
            for i, (t, a) in enumerate(levels):
                done += a
                apl[i] = a
                comps.append({"level": i + 1, "action_num": done, "elapsed_seconds": t})
            prog, t = [], 0.5
            while t < END_S:
                k = sum(1 for c in comps if c["elapsed_seconds"] <= t)
                base = comps[k - 1]["action_num"] if k else 0
                t_base = comps[k - 1]["elapsed_seconds"] if k else 0.0
                a = base + int(RATE * (t - t_base))
                nxt = comps[k]["action_num"] - 1 if k < len(comps) else None
                prog.append([t, min(a, nxt) if nxt is not None else a, k])
                t += TURN_S
            total = done + (int(RATE * (END_S - (comps[-1]["elapsed_seconds"] if comps else 0))))
            apl[len(comps)] = total - done if len(comps) < len(apl) else 0
            prog.append([END_S, total, len(comps)])
            score = game_score(baselines, [c for c in apl[: len(comps)]])
            lines.append(json.dumps({
                "game_id": gid, "pass": p, "total_levels": len(baselines),
                "levels_completed": len(comps), "actions": total, "actions_per_level": apl,
                "final_score": score, "progress": prog, "level_completions": comps,
            }))
    runs, base = dirpath / "runs.jsonl", dirpath / "public-games.json"
    runs.write_text("\n".join(lines) + "\n")
    base.write_text(json.dumps(games))
    return runs, base


@dataclass
class ScriptedResult:
    game_id: str
    levels: int
    actions: int
    score: float
    end_reason: str
    error: str | None = None


@dataclass(frozen=True)
class ScriptedProgress:
    game_id: str
    levels: int
    actions: int
    elapsed: float


class ScriptedWorker:
    """A game worker with the play_game signature that lives on a `VirtualClock`.

    Game `gid` acts every `step_s` seconds and completes its next level once
    `levels[gid][k]` seconds have passed on level k (counted from the previous level, the
    start, or the last fresh start). It honours `stop` and `deadline` between actions,
    never acting past either, and logs (game, event, clock time) for the tests to check.
    """

    def __init__(self, clock, levels: dict[str, Sequence[float]], step_s: float = 10.0):
        self.clock, self.levels, self.step_s = clock, levels, step_s
        self.log: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def _note(self, gid: str, what: str) -> None:
        with self._lock:
            self.log.append((gid, what, self.clock.now()))

    def __call__(self, source, game_id, policy, *, max_actions, record_path, stop=None,
                 deadline=None, on_progress=None, fresh=None):
        clock = self.clock
        self._note(game_id, "start")
        t0 = mark = clock.now()
        levels = actions = 0
        plan = list(self.levels.get(game_id, ()))
        reason = "max_actions"
        while actions < max_actions:
            left = None if deadline is None else deadline - clock.now()
            if stop is not None and stop.is_set():
                reason = "stopped"
                break
            if left is not None and left <= 0:
                reason = "deadline"
                break
            if fresh is not None and fresh.is_set():
                fresh.clear()
                mark = clock.now()
                self._note(game_id, "fresh")
            clock.sleep(self.step_s if left is None else min(self.step_s, left))
            if (stop is not None and stop.is_set()) or (deadline is not None and clock.now() >= deadline):
                continue  # the thought was cut short: no action after a stop or the deadline
            actions += 1
            if levels < len(plan) and clock.now() - mark >= plan[levels]:
                levels += 1
                mark = clock.now()
            if on_progress:
                on_progress(ScriptedProgress(game_id, levels, actions, clock.now() - t0))
        self._note(game_id, "end")
        return ScriptedResult(game_id, levels, actions, float(levels), reason)
