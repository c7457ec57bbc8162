"""Execute a scheduling policy over real game workers: every game admitted, at most `slots`
holding a model-server slot (asyncio + one thread per started game).

The runner owns the slots, the clock and the hard deadline; the policy (scheduler.policy)
decides who gets a free slot, who is preempted and who stops; the worker
(duck.play.play_game by default) plays one game and ends it cleanly between two actions when
its `stop` event is set or its `deadline` (a time.monotonic() value) passes, closing its
record. The runner never looks inside a game: it sees the worker's progress reports
(actions, levels, generated tokens), its yields and its result.

Slots: a started game holds its slot across its tool calls and model requests. At a yield
point (Session.yield_slot: a trim, a level change, or a model request after a preemption)
its worker calls its `SlotGate`: the slot is released, the policy decides, and the gate
returns once the game holds a slot again (at once when it is still the best choice), or
when it must end. So a paused game keeps its thread, its kernel and its context, and
resumes where it was; the pool has one thread per game for that reason (`asyncio.to_thread`'s
default pool holds only cpu_count + 4 threads and would silently queue games).

Safety: whatever the policy says, at most `slots` games hold a slot, no game is given one at
or after the budget's end, every game's deadline is clipped to it, and the runner sets a
game's stop event (waking it if paused) when its deadline passes. `timeline` records every
grant and release, for the tests and the summary's idle slot share.
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


class SlotGate:
    """The worker's side of its game's slot; `gate(reason)` is called in the game's thread
    (Session.yield_slot). `reason` None: yield only if `preempt` is set."""

    def __init__(self, game_id: str, clock: Any, post: Callable[[str, str], None], until: float | None):
        self.game_id, self.clock, self.post, self.until = game_id, clock, post, until
        self.preempt = threading.Event()
        self.resume = threading.Event()

    def __call__(self, reason: str | None) -> None:
        if reason is None:
            if not self.preempt.is_set():
                return
            reason = "preempted"
        self.preempt.clear()
        self.resume.clear()  # before posting: the runner may grant at once
        self.post(self.game_id, reason)
        self.clock.park(self.resume, self.until)


@dataclass
class GameRun:
    """One game's schedule and outcome (times in seconds since the runner started)."""

    state: GameState
    stop: threading.Event = field(default_factory=threading.Event)
    gate: SlotGate | None = None
    deadline: float | None = None
    ended_at: float | None = None
    result: Any = None
    error: str | None = None


@dataclass
class ScheduleResult:
    games: dict[str, GameRun]
    budget_s: float
    slots: int = 0
    t0: float = 0.0  # the clock's reading at the start (time.monotonic() on the real clock)
    timeline: list[tuple[float, str, str, str]] = field(default_factory=list)  # (t, game, grant|release, why)

    @property
    def last_end(self) -> float:
        return max((g.ended_at for g in self.games.values() if g.ended_at is not None), default=0.0)

    def holding(self) -> list[tuple[float, int]]:
        """(time, games holding a slot just after it) at every grant and release."""
        n, out = 0, []
        for t, _, what, _ in self.timeline:
            n += 1 if what == "grant" else -1
            out.append((t, n))
        return out

    def idle_slot_share(self) -> float:
        """Share of slot-seconds without a game, from the start to the last end."""
        end = self.last_end
        if end <= 0 or self.slots <= 0:
            return 0.0
        used, n, t0 = 0.0, 0, 0.0
        for t, held in self.holding():
            used += n * (min(t, end) - t0)
            n, t0 = held, min(t, end)
        used += n * (end - t0)
        return round(1.0 - used / (self.slots * end), 4)

    def summary(self) -> dict:
        rows = {}
        for gid, g in self.games.items():
            r, st = g.result, g.state
            rows[gid] = {
                "started_at": st.started_at,
                "ended_at": g.ended_at,
                "deadline": g.deadline,
                "levels": getattr(r, "levels", st.levels),
                "actions": getattr(r, "actions", st.actions),
                "tokens": st.tokens,
                "yields": st.yields,
                "score": getattr(r, "score", 0.0),
                "end_reason": getattr(r, "end_reason", None),
                "error": g.error or getattr(r, "error", None),
            }
        return {"budget_s": self.budget_s, "slots": self.slots, "last_end": self.last_end,
                "max_holding": max((n for _, n in self.holding()), default=0),
                "idle_slot_share": self.idle_slot_share(), "games": rows}


class Runner:
    """Runs `game_ids` under `policy` within `budget_s` seconds, `slots` holding a slot at once.

    `play_policy(game_id)` builds the per-game playing policy (random, explorer, llm) that
    is handed to the worker; `worker` has the signature of duck.play.session.play_game
    (the default), `gate` included.
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
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.policy, self.slots, self.budget_s = policy, slots, budget_s
        self.source, self.play_policy, self.max_actions = source, play_policy, max_actions
        self.records_dir = Path(records_dir)
        self.worker = worker or play_game
        self.clock = clock or RealClock()
        # Look again at least this often: progress, yields and ends wake the runner, but a
        # threshold passing in silence does not (policies give wake_at; this is a backstop).
        self.max_poll_s = max_poll_s

    async def run(self, game_ids: Sequence[str]) -> ScheduleResult:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        clock = self.clock
        t0 = clock.now()
        runs = {gid: GameRun(GameState(gid)) for gid in game_ids}
        order = [runs[g].state for g in game_ids]
        result = ScheduleResult(runs, self.budget_s, self.slots, t0)
        lock = threading.Lock()
        tasks: dict[asyncio.Future, str] = {}
        yields: list[tuple[str, str]] = []
        recheck: dict[str, int] = {}

        def news() -> None:  # any thread: the runner must look
            clock.notify()
            loop.call_soon_threadsafe(event.set)

        def post(gid: str, reason: str) -> None:  # a worker thread at a yield point
            with lock:
                yields.append((gid, reason))
            news()

        def progress_cb(gid: str) -> Callable:
            def cb(p: Any) -> None:  # in the worker thread, after every action and reply
                with lock:
                    st = runs[gid].state
                    first = st.actions == 0
                    if getattr(p, "total_levels", None):
                        st.total_levels = int(p.total_levels)
                    levelled = st.progress(levels=int(getattr(p, "levels", st.levels)),
                                           actions=int(getattr(p, "actions", st.actions)),
                                           tokens=int(getattr(p, "tokens", st.tokens)), now=clock.now() - t0)
                    due = recheck.get(gid)
                    wake = levelled or (first and st.actions > 0) or (due is not None and st.tokens >= due)
                if wake:
                    news()

            return cb

        def launch(pool: ThreadPoolExecutor, gid: str, deadline: float) -> None:
            g = runs[gid]
            g.deadline = deadline
            until = clock.to_monotonic(t0 + deadline)
            g.gate = SlotGate(gid, clock, post, until)
            kwargs = dict(max_actions=self.max_actions, record_path=self.records_dir / f"{gid}.jsonl",
                          stop=g.stop, deadline=until, on_progress=progress_cb(gid), gate=g.gate)
            pol = self.play_policy(gid) if self.play_policy else None
            call = functools.partial(self.worker, self.source, gid, pol, **kwargs)
            clock.attach()
            fut = loop.run_in_executor(pool, call)
            fut.add_done_callback(lambda _f: news())
            tasks[fut] = gid

        def note(now: float, gid: str, what: str, why: str) -> None:
            result.timeline.append((now, gid, what, why))

        self.records_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=max(1, len(game_ids)), thread_name_prefix="game") as pool:
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
                        if g.state.status == "running":
                            note(now, g.state.game_id, "release", "end")
                        g.state.status, g.ended_at = "done", now
                        g.state.levels = max(g.state.levels, int(getattr(g.result, "levels", 0)))
                with lock:
                    for gid, reason in yields:
                        st = runs[gid].state
                        if st.status == "running":
                            st.release(reason)
                            note(now, gid, "release", reason)
                        if runs[gid].stop.is_set():  # stopped while it played: end it from here
                            clock.unpark(runs[gid].gate.resume)
                    yields.clear()
                    for g in runs.values():  # second lock on every deadline
                        if g.state.status in ("running", "waiting") and now >= g.deadline and not g.stop.is_set():
                            self._stop(g)
                    queued = any(s.status == "queued" for s in order)
                    if not tasks and (not queued or now >= self.budget_s):
                        break
                    d = self.policy.decide(now, self.budget_s, self.slots, order)
                    for gid in d.stop:
                        if runs[gid].state.status in ("running", "waiting") and not runs[gid].stop.is_set():
                            self._stop(runs[gid])
                    for gid in d.preempt:
                        g = runs[gid]
                        if g.state.status == "running" and g.gate is not None and not g.stop.is_set():
                            g.gate.preempt.set()
                            g.state.preempt_requested = True
                    recheck.clear()
                    recheck.update(d.recheck)
                    free = self.slots - sum(s.status == "running" for s in order)
                    granted = 0
                    for gid in d.start if now < self.budget_s else []:
                        g = runs[gid]
                        if granted >= free:
                            break
                        if g.state.status == "queued":
                            g.state.grant(now)
                            launch(pool, gid, min(d.deadlines.get(gid, self.budget_s), self.budget_s))
                            note(now, gid, "grant", "start")
                        elif g.state.status == "waiting" and not g.stop.is_set():
                            g.state.grant(now)
                            clock.unpark(g.gate.resume)
                            note(now, gid, "grant", "resume")
                        else:
                            continue
                        granted += 1
                if not tasks and not granted and d.wake_at is None:
                    log.error("policy starts nothing and nothing runs: %d games unplayed",
                              sum(s.status == "queued" for s in order))
                    break
                marks = [d.wake_at, self.budget_s, now + self.max_poll_s]
                marks += [runs[g].deadline for g in tasks.values()]
                wake = min(m for m in marks if m is not None and m > now)
                await clock.wait(t0 + wake, event)
        return result

    def _stop(self, g: GameRun) -> None:
        """End a game: between two actions if it plays, from its yield point if it waits."""
        g.stop.set()
        g.state.stop_requested = True
        if g.state.status == "waiting" and g.gate is not None:
            self.clock.unpark(g.gate.resume)


def run_schedule(policy: Policy, game_ids: Sequence[str], **kwargs) -> ScheduleResult:
    """Synchronous wrapper: `asyncio.run(Runner(policy, **kwargs).run(game_ids))`."""
    return asyncio.run(Runner(policy, **kwargs).run(game_ids))
