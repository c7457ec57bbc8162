"""Execute a scheduling policy over real game workers: every game admitted, at most `slots`
holding a model-server slot.

The slot book (scheduler.book) holds the slot rules; the worker (duck.play.play_game by
default) plays one game and ends it cleanly between two actions when its `stop` event is set or
its `deadline` (a time.monotonic() value) passes. The runner never looks inside a game: it sees
the worker's progress reports (actions, levels, generated tokens), its yields and its end.

One concurrency model: `Runner.run` blocks (a notebook cell calls it) and decides in the calling
thread; each game plays in a thread of its own; what they share is read and written under the
clock's one condition, and every wait is `clock.wait` (so scheduler.clock's virtual clock sees
when everyone waits). At a yield point (Session.yield_slot) a worker calls its `SlotGate`, which
returns once the game holds a slot again, or must end. A worker that has not returned `grace_s`
after the budget's end is left behind (a daemon thread) with an error: a hung game cannot hold
up what comes after the run.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from duck.play.session import play_game

from .book import SlotBook
from .clock import RealClock
from .policy import GameState, Policy

log = logging.getLogger(__name__)


@dataclass
class GameRun:
    """One game's schedule and outcome (times in seconds since the runner started)."""

    state: GameState
    stop: threading.Event = field(default_factory=threading.Event)
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
    (the default), `gate` included. `grace_s`: how long past the budget's end to wait for
    workers that have not returned (None: for ever).
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
        grace_s: float | None = None,
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
        self.grace_s = grace_s

    def run(self, game_ids: Sequence[str]) -> ScheduleResult:
        """Play `game_ids` to the end of the budget (blocking; call it from any thread)."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        with self.clock.cond:
            return _Run(self, game_ids).loop()


class _Run:
    """One run's state, all of it read and written under `clock.cond`."""

    def __init__(self, runner: Runner, game_ids: Sequence[str]):
        self.r, self.clock = runner, runner.clock
        self.t0 = self.clock.now()
        self.games = {gid: GameRun(GameState(gid)) for gid in game_ids}
        self.book = SlotBook([self.games[g].state for g in game_ids], slots=runner.slots,
                             budget_s=runner.budget_s, policy=runner.policy,
                             on_stop=lambda gid, now: self.games[gid].stop.set())
        self.result = ScheduleResult(self.games, runner.budget_s, runner.slots, self.t0, self.book.timeline)
        self.news = False  # something the runner must look at happened
        self.over = False  # the runner has returned: a late worker changes nothing

    def now(self) -> float:
        return self.clock.now() - self.t0

    def tell(self) -> None:
        """A game thread has news for the runner."""
        self.news = True
        self.clock.cond.notify_all()

    def loop(self) -> ScheduleResult:
        clock = self.clock
        clock.attach()
        try:
            self.schedule()
        except BaseException:  # a broken policy, or Ctrl-C: end the games cleanly, then say so
            for gid in self.games:
                self.book.stop(gid, self.now())
            clock.cond.notify_all()
            raise
        finally:
            self.over = True
            clock.detach()
        return self.result

    def schedule(self) -> None:
        """Decide, launch, wait for news or the next mark; until every game is over."""
        r, book, clock = self.r, self.book, self.clock
        while True:
            now = self.now()
            book.overdue(now)  # a second lock on every deadline (the workers hold the first)
            if not book.live() and (not book.queued() or now >= r.budget_s):
                break
            if book.live() and r.grace_s is not None and now >= r.budget_s + r.grace_s:
                self.abandon()
                break
            grants = book.decide(now)
            for gid, kind in grants:
                if kind == "start":
                    self.launch(gid)
            clock.cond.notify_all()  # resumed and stopped games see it
            if not book.live() and not grants and book.wake_at is None:
                log.error("policy starts nothing and nothing runs: %d games unplayed", book.queued())
                break
            marks = [book.wake_at, r.budget_s, now + r.max_poll_s, book.next_deadline()]
            if r.grace_s is not None:
                marks.append(r.budget_s + r.grace_s)
            wake = min(m for m in marks if m is not None and m > now)
            self.news = False
            clock.wait(self.t0 + wake, lambda: self.news, quiet=True)

    def abandon(self) -> None:
        """Leave the workers that did not end by the budget's end plus the grace."""
        for gid, g in self.games.items():
            if g.state.status in ("running", "waiting"):
                g.error = f"the worker did not return {self.r.grace_s:.0f} s after the budget's end"
                log.error("%s: %s", gid, g.error)

    def launch(self, gid: str) -> None:
        r, g = self.r, self.games[gid]
        g.deadline = self.book.deadlines[gid]
        until = self.clock.to_monotonic(self.t0 + g.deadline)
        # Made here: a policy that cannot be made is a bug that ends the runner (the notebook's
        # pool then plays the games it never started).
        pol = r.play_policy(gid) if r.play_policy else None
        call = functools.partial(r.worker, r.source, gid, pol, max_actions=r.max_actions,
                                 record_path=r.records_dir / f"{gid}.jsonl", stop=g.stop, deadline=until,
                                 on_progress=functools.partial(self.progress, gid), gate=SlotGate(self, gid, until))
        self.clock.attach()
        threading.Thread(target=self.play, args=(gid, call), name=f"game-{gid}", daemon=True).start()

    # -- in a game's thread ---------------------------------------------------------------------
    def play(self, gid: str, call: Callable[[], Any]) -> None:
        g = self.games[gid]
        result = error = None
        try:
            result = call()
        except Exception as e:  # the worker contract says never; be safe anyway
            error = f"{type(e).__name__}: {e}"
            log.error("worker for %s raised: %s", gid, error)
        with self.clock.cond:
            if not self.over:
                now = self.now()
                g.result, g.error, g.ended_at = result, error, now
                self.book.end(gid, now)
                g.state.levels = max(g.state.levels, int(getattr(result, "levels", 0)))
                self.tell()
            self.clock.detach()

    def progress(self, gid: str, p: Any) -> None:
        """After every action and reply: the state the policy sees; news on what it acts on."""
        with self.clock.cond:
            st = self.games[gid].state
            first = st.actions == 0
            if getattr(p, "total_levels", None):
                st.total_levels = int(p.total_levels)
            levelled = st.progress(levels=int(getattr(p, "levels", st.levels)),
                                   actions=int(getattr(p, "actions", st.actions)),
                                   tokens=int(getattr(p, "tokens", st.tokens)))
            due = self.book.recheck.get(gid)
            if levelled or (first and st.actions > 0) or (due is not None and st.tokens >= due):
                self.tell()


class SlotGate:
    """The worker's side of its game's slot; `gate(reason)` is called in the game's thread
    (Session.yield_slot). `reason` None: yield only if the policy preempted the game;
    "parked": the game's model server is down, so it frees its slot and returns at once (it
    waits for the server itself, duck.policies.Parking); its next call waits for a slot.

    It releases the slot in the book and waits on the one condition until the game holds a
    slot again or must end (stopped, or its deadline `until` passed)."""

    def __init__(self, run: _Run, game_id: str, until: float):
        self.run, self.game_id, self.until = run, game_id, until
        self.state = run.games[game_id].state

    @property
    def preempted(self) -> bool:
        """Will the next `gate(None)` yield? (read without the lock: a hint for logs)"""
        return self.state.preempt_requested

    def __call__(self, reason: str | None) -> None:
        run, st = self.run, self.state
        with run.clock.cond:
            if reason == "parked":  # the model server is down: the slot goes, no grant until unparked
                run.book.release(self.game_id, reason, run.now())
                st.parked = True
                run.tell()
                return
            if st.parked:  # back from an outage: waits for a slot like any yielded game
                st.parked = False
            elif reason is None and not st.preempt_requested:
                return
            run.book.release(self.game_id, reason or "preempted", run.now())
            run.tell()
            run.clock.wait(self.until, lambda: st.status == "running" or st.stop_requested)


def run_schedule(policy: Policy, game_ids: Sequence[str], **kwargs) -> ScheduleResult:
    """`Runner(policy, **kwargs).run(game_ids)`."""
    return Runner(policy, **kwargs).run(game_ids)
