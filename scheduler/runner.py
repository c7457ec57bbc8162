"""Execute a scheduling policy over real game workers, N at a time (asyncio + threads).

The runner owns the slots, the clock and the hard deadline; the policy (scheduler.policy)
decides who starts and who stops; the worker (duck.play.play_game by default) plays one
game and ends it cleanly between two actions when its `stop` event is set or its
`deadline` (a time.monotonic() value) passes, closing its record. The runner never looks
inside a game: it sees only the worker's progress reports and its result.

Why threads: a worker spends its time waiting on the model server (or, for the random and
explorer policies, stepping a small engine), so one thread per slot is enough, and the
asyncio loop is free to decide. The workers run in a pool of exactly `slots` threads:
`asyncio.to_thread`'s default pool holds only cpu_count + 4 threads (6 on a 2-core box),
fewer than 28 slots, and would silently queue games behind each other.

Safety: whatever the policy says, no game starts at or after the budget's end, every
game's deadline is clipped to it, and the runner also sets a game's stop event when its
deadline passes (the worker checks the deadline itself; this is a second lock).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from duck.play.session import play_game

from .clock import RealClock
from .policy import GameState, Policy

log = logging.getLogger(__name__)


@dataclass
class GameRun:
    """One game's schedule and outcome (times in seconds since the runner started)."""

    state: GameState
    stop: threading.Event = field(default_factory=threading.Event)
    fresh: threading.Event = field(default_factory=threading.Event)
    deadline: float | None = None
    ended_at: float | None = None
    result: Any = None
    error: str | None = None


@dataclass
class ScheduleResult:
    games: dict[str, GameRun]
    budget_s: float

    @property
    def last_end(self) -> float:
        return max((g.ended_at for g in self.games.values() if g.ended_at is not None), default=0.0)

    def summary(self) -> dict:
        rows = {}
        for gid, g in self.games.items():
            r = g.result
            rows[gid] = {
                "started_at": g.state.started_at,
                "ended_at": g.ended_at,
                "deadline": g.deadline,
                "levels": getattr(r, "levels", g.state.levels),
                "actions": getattr(r, "actions", g.state.actions),
                "score": getattr(r, "score", 0.0),
                "end_reason": getattr(r, "end_reason", None),
                "fresh_starts": g.state.fresh_starts,
                "error": g.error or getattr(r, "error", None),
            }
        return {"budget_s": self.budget_s, "last_end": self.last_end, "games": rows}


class Runner:
    """Runs `game_ids` under `policy` within `budget_s` seconds, `slots` at a time.

    `play_policy(game_id)` builds the per-game playing policy (random, explorer, llm) that
    is handed to the worker; `worker` has the signature of duck.play.session.play_game
    (the default), `fresh` included.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        slots: int,
        budget_s: float,
        source: Any = None,
        play_policy: Callable[[str], Any] | None = None,
        max_actions: int = 10**9,
        records_dir: str | Path = "runs/schedule/records",
        worker: Callable | None = None,
        clock: Any = None,
        max_poll_s: float = 30.0,
    ):
        self.policy, self.slots, self.budget_s = policy, slots, budget_s
        self.source, self.play_policy, self.max_actions = source, play_policy, max_actions
        self.records_dir = Path(records_dir)
        self.worker = worker or play_game
        self.clock = clock or RealClock()
        # Look again at least this often: a worker's progress wakes the runner, but a stall
        # threshold passing in silence does not (policies give wake_at; this is a backstop).
        self.max_poll_s = max_poll_s

    async def run(self, game_ids: Sequence[str]) -> ScheduleResult:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        clock = self.clock
        t0 = clock.now()
        runs = {gid: GameRun(GameState(gid)) for gid in game_ids}
        order = [runs[g].state for g in game_ids]
        lock = threading.Lock()
        tasks: dict[asyncio.Future, str] = {}

        def news() -> None:  # any thread: the runner must look
            clock.notify()
            loop.call_soon_threadsafe(event.set)

        def progress_cb(gid: str) -> Callable:
            def cb(p: Any) -> None:  # in the worker thread, after every action
                levelled = False
                with lock:
                    st = runs[gid].state
                    st.actions = int(getattr(p, "actions", st.actions))
                    levels = int(getattr(p, "levels", st.levels))
                    if levels > st.levels:
                        st.levels, st.last_level_at, levelled = levels, clock.now() - t0, True
                if levelled:
                    news()

            return cb

        def launch(pool: ThreadPoolExecutor, gid: str, deadline: float) -> None:
            g = runs[gid]
            g.deadline = deadline
            kwargs = dict(
                max_actions=self.max_actions,
                record_path=self.records_dir / f"{gid}.jsonl",
                stop=g.stop,
                deadline=clock.to_monotonic(t0 + deadline),
                on_progress=progress_cb(gid),
                fresh=g.fresh,
            )
            pol = self.play_policy(gid) if self.play_policy else None
            call = functools.partial(self.worker, self.source, gid, pol, **kwargs)
            clock.attach()
            fut = loop.run_in_executor(pool, call)
            fut.add_done_callback(lambda _f: news())
            tasks[fut] = gid

        self.records_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=max(1, self.slots), thread_name_prefix="game") as pool:
            while True:
                now = clock.now() - t0
                for fut in [f for f in tasks if f.done()]:
                    g = runs[tasks.pop(fut)]
                    clock.detach()
                    try:
                        g.result = fut.result()
                    except Exception as e:  # the worker contract says never; be safe anyway
                        g.error = f"{type(e).__name__}: {e}"
                        log.error("worker for %s raised: %s", g.state.game_id, g.error)
                    with lock:
                        g.state.status, g.ended_at = "done", now
                        g.state.levels = max(g.state.levels, int(getattr(g.result, "levels", 0)))
                with lock:
                    for g in runs.values():  # second lock on every deadline
                        if g.state.status == "running" and now >= g.deadline and not g.stop.is_set():
                            g.stop.set()
                            g.state.stop_requested = True
                    queued = any(s.status == "queued" for s in order)
                    if not tasks and (not queued or now >= self.budget_s):
                        break
                    d = self.policy.decide(now, self.budget_s, self.slots, order)
                    self._apply(d, runs, now)
                    free = self.slots - len(tasks)
                    starts = [gid for gid in d.start if runs[gid].state.status == "queued"]
                    for gid in starts[: max(0, free)] if now < self.budget_s else []:
                        st = runs[gid].state
                        st.status, st.started_at = "running", now
                        launch(pool, gid, min(d.deadlines.get(gid, self.budget_s), self.budget_s))
                if not tasks and not starts:
                    if d.wake_at is None:
                        log.error("policy starts nothing and nothing runs: %d games unplayed",
                                  sum(s.status == "queued" for s in order))
                        break
                marks = [d.wake_at, self.budget_s, now + self.max_poll_s]
                marks += [runs[g].deadline for g in tasks.values()]
                wake = min(m for m in marks if m is not None and m > now)
                await clock.wait(t0 + wake, event)
        return ScheduleResult(runs, self.budget_s)

    def _apply(self, d, runs: dict[str, GameRun], now: float) -> None:
        for gid in d.stop:
            g = runs[gid]
            if g.state.status == "running" and not g.stop.is_set():
                g.stop.set()
                g.state.stop_requested = True
        for gid in d.fresh:
            g = runs[gid]
            if g.state.status != "running" or g.state.stop_requested:
                continue
            g.fresh.set()  # the worker clears it when its new context is in place
            g.state.fresh_starts += 1
            g.state.last_fresh_at = now


def run_schedule(policy: Policy, game_ids: Sequence[str], **kwargs) -> ScheduleResult:
    """Synchronous wrapper: `asyncio.run(Runner(policy, **kwargs).run(game_ids))`."""
    return asyncio.run(Runner(policy, **kwargs).run(game_ids))

