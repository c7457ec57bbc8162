"""Test doubles for the scheduler: synthetic recorded runs (tests/test_scheduler_simulate.py),
and a scripted game worker that honours the play_game contract on a virtual clock
(tests/test_scheduler_runner.py: the real worker needs real games and a model, and real time).

The virtual clock keeps scheduler.clock's contract and advances only when *everyone* waits
(the runner and every attached game thread in `wait` or `sleep`), then jumps straight to the
earliest wake-up, so a test plays hours of schedule in milliseconds and the same way every
time (the runner waits `quiet`: it decides only once every game thread waits too).
"""

from __future__ import annotations

import gzip
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from duck.play.scoring import game_score

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
    """Write runs.jsonl, turns/<game>.jsonl.gz (one turn per progress entry: ~900 generated
    tokens and ~1,700 of context growth once converted, devkit.simulator.traces) and
    public-games.json for SYNTHETIC; returns the paths of the first and the last."""
    dirpath = Path(dirpath)
    (dirpath / "turns").mkdir(parents=True, exist_ok=True)
    lines, games = [], []
    turns: dict[str, list[str]] = {}
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
            for k, (_, a, lv) in enumerate(prog[:-1]):
                turns.setdefault(gid, []).append(json.dumps({
                    "game_id": gid, "pass": p, "turn_index": k, "action_num_at_start": a,
                    "levels_completed_at_start": lv, "reasoning_chars": 3000, "prompt_state": "",
                    "model_responses": [{"content_chars": 200}], "calls": [{"code": "x" * 200, "result_chars": 500}]}))
            lines.append(json.dumps({
                "game_id": gid, "pass": p, "total_levels": len(baselines),
                "levels_completed": len(comps), "actions": total, "actions_per_level": apl,
                "final_score": score, "progress": prog, "level_completions": comps,
            }))
    for gid, rows in turns.items():
        with gzip.open(dirpath / "turns" / f"{gid}.jsonl.gz", "wt") as fh:
            fh.write("\n".join(rows) + "\n")
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
    tokens: int = 0
    total_levels: int | None = None


class ScriptedWorker:
    """A game worker with the play_game signature that lives on a `VirtualClock`.

    A step is one model request (`tokens_per_step` generated tokens over `step_s` seconds)
    and one tool call that plays one action. Game `gid` completes its next level once it has
    generated `levels[gid][k]` tokens on level k; its context grows by the step's tokens and
    is trimmed to half of `trim_tokens` when it reaches it. Like the agent it calls the slot
    gate before every request (`"trim"` right after a trim, None otherwise) and after a level
    (`"level"`), never in the middle of a step; it honours `stop` and `deadline` between
    actions, never acting past either, and logs (game, event, clock time) for the tests:
    start, step, yield:<reason>, resume, end.
    """

    def __init__(self, clock, levels: dict[str, Sequence[int]], step_s: float = 10.0,
                 tokens_per_step: int = 1000, trim_tokens: int | None = None,
                 total_levels: dict[str, int] | None = None):
        self.clock, self.levels, self.step_s = clock, levels, step_s
        self.tokens_per_step, self.trim_tokens = tokens_per_step, trim_tokens
        self.total_levels = total_levels or {}
        self.log: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def _note(self, gid: str, what: str) -> None:
        with self._lock:
            self.log.append((gid, what, self.clock.now()))

    def __call__(self, source, game_id, policy, *, max_actions, record_path, stop=None,
                 deadline=None, on_progress=None, gate=None):
        clock = self.clock
        self._note(game_id, "start")
        t0 = clock.now()
        levels = actions = tokens = level_tokens = context = 0
        plan = list(self.levels.get(game_id, ()))
        n_levels = self.total_levels.get(game_id, len(plan) or None)

        def ended() -> str | None:
            if stop is not None and stop.is_set():
                return "stopped"
            if deadline is not None and clock.now() >= deadline:
                return "deadline"
            return None

        def at_gate(reason: str | None) -> bool:
            """The slot gate; True if the game must end."""
            if gate is None:
                return False
            if reason is not None or getattr(gate, "preempted", False):
                self._note(game_id, f"yield:{reason or 'preempted'}")
                gate(reason)
                self._note(game_id, "resume")
            else:
                gate(None)
            return ended() is not None

        reason = "max_actions"
        while actions < max_actions:
            if why := ended():
                reason = why
                break
            trimmed = False
            if self.trim_tokens and context + self.tokens_per_step > self.trim_tokens:
                context, trimmed = self.trim_tokens // 2, True
            if at_gate("trim" if trimmed else None):
                reason = ended()
                break
            left = None if deadline is None else deadline - clock.now()
            clock.sleep(self.step_s if left is None else min(self.step_s, left))
            if ended():
                continue  # the thought was cut short: no action after a stop or the deadline
            tokens += self.tokens_per_step
            level_tokens += self.tokens_per_step
            context += self.tokens_per_step
            actions += 1
            self._note(game_id, "step")
            levelled = levels < len(plan) and level_tokens >= plan[levels]
            if levelled:
                levels, level_tokens = levels + 1, 0
            if on_progress:
                on_progress(ScriptedProgress(game_id, levels, actions, clock.now() - t0, tokens, n_levels))
            if levelled and n_levels and levels >= n_levels:
                reason = "won"
                break
            if levelled and at_gate("level"):
                reason = ended()
                break
        self._note(game_id, "end")
        return ScriptedResult(game_id, levels, actions, float(levels), reason)


class VirtualClock:
    """Deterministic time shared by the runner's thread and its game threads."""

    def __init__(self, start: float = 0.0):
        self._t = float(start)
        self.cond = threading.Condition()
        self._threads = 0  # attached threads
        self._waiting: dict[int, tuple[float, Callable[[], bool], bool]] = {}  # thread -> (until, ready, quiet)

    def now(self) -> float:
        return self._t

    def to_monotonic(self, t: float) -> float:
        return t  # workers under a virtual clock read this clock, not time.monotonic()

    def attach(self) -> None:
        self._threads += 1

    def detach(self) -> None:
        self._threads -= 1
        self._advance()

    def wait(self, until: float | None, ready: Callable[[], bool], quiet: bool = False) -> None:
        """Block the calling thread until `ready()` or virtual time `until`; `quiet`: and then
        until every other thread waits without being due. One quiet waiter at most (the runner)."""
        me = threading.get_ident()
        self._waiting[me] = (math.inf if until is None else until, ready, quiet)
        try:
            if not self._due(me):
                self._advance()  # only here and in detach: the only moments everyone may wait
                while not self._due(me):
                    self.cond.wait()
        finally:
            del self._waiting[me]

    def sleep(self, seconds: float) -> None:
        """Pass `seconds` of virtual time in the calling (attached) thread."""
        with self.cond:
            self.wait(self._t + max(0.0, seconds), lambda: False)

    # -- under the lock --------------------------------------------------------------------
    def _due(self, tid: int) -> bool:
        """May waiting thread `tid` go on?"""
        until, ready, quiet = self._waiting[tid]
        if self._t < until and not ready():
            return False
        return not quiet or all(not self._due(o) for o in self._waiting if o != tid) and self._all_wait()

    def _all_wait(self) -> bool:
        return len(self._waiting) >= self._threads

    def _advance(self) -> None:
        """If everyone waits: wake whoever may go on, else jump to the earliest wake-up."""
        if not self._waiting or not self._all_wait():
            return
        if not any(self._due(t) for t in self._waiting):
            nxt = min(u for u, _, _ in self._waiting.values())
            if nxt == math.inf:
                return  # nobody would ever wake (the runner always waits with a time-out)
            self._t = max(self._t, nxt)
        self.cond.notify_all()
