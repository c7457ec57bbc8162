"""Playing a list of jobs (one game run each) while the run shows progress and listens for
Ctrl-C: what `duck play` and `duck ab` share.

A job is a label (the display's row) and the arguments of a top-level function that plays it
and returns its `end` message (duck.run.games). With more than one worker the jobs run in a
pool of worker processes kept for the `Runner`'s life; with one, in the run's own process.
`interactive`: the signal handlers of duck.run.interrupt.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue as queue_mod
import threading
import traceback
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from contextlib import ExitStack
from typing import Any, Callable

import duck.run.games as game_runs
from duck.run.interrupt import Interrupts
from duck.run.progress import RunView

Job = tuple[str, tuple]  # (label, arguments of the play function)


def error_end(label: str, e: BaseException) -> dict:
    """A job's end message for a crash outside the game (a policy that cannot be made, a
    worker that died, a disk full), with its traceback (called inside the `except`)."""
    reason = "disk_full" if isinstance(e, OSError) and game_runs.is_disk_full(e) else "error"
    return {"kind": "end", "game": label, "end_reason": reason, "error": f"{type(e).__name__}: {e}",
            "levels": 0, "actions": 0, "score": 0.0, "traceback": traceback.format_exc(limit=8)}


class Runner:
    """Runs jobs with a view and a stop event; a context manager (the pool and the signal
    handlers live inside it). `reason`: what stopped the run ("Ctrl-C", "SIGTERM"), or None."""

    def __init__(self, view: RunView | None, *, workers: int, interactive: bool,
                 kill_line: Callable[[], str] | None = None) -> None:
        self.view, self.workers = view, max(1, workers)
        self.parallel = self.workers > 1
        self.stop: Any = multiprocessing.Event() if self.parallel else threading.Event()
        self.interactive, self.kill_line = interactive, kill_line
        self._stack = ExitStack()
        self._pool: ProcessPoolExecutor | None = None
        self._queue: Any = None
        self._interrupts: Interrupts | None = None
        self._started = False

    @property
    def reason(self) -> str | None:
        return self._interrupts.reason if self._interrupts is not None else None

    def __enter__(self) -> "Runner":
        if self.interactive:
            self._interrupts = self._stack.enter_context(
                Interrupts(self.stop, on_stop=self._on_stop, kill=self._kill, on_kill=self._on_kill))
        if self.view is not None:
            self._stack.callback(self.view.close)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def _on_stop(self, why: str) -> None:
        if self.view is not None:
            self.view.notice(f"{why}: stopping: every game ends at its next action, queued games do not "
                             "start (Ctrl-C again kills at once)")

    def _kill(self) -> None:
        for p in list(getattr(self._pool, "_processes", {}).values()) if self._pool else []:
            p.kill()

    def _on_kill(self) -> None:
        if self.view is not None and self.kill_line is not None:
            self.view.kill_line(self.kill_line())

    def _start_view(self) -> None:
        if self.view is not None and not self._started:
            self._started = True
            self.view.start()  # after the workers forked: no display thread is copied into them

    def run(self, fn: Callable[..., dict], jobs: list[Job]) -> list[dict]:
        """Each job's end message, in the jobs' order ({"kind": "skipped"} for a job the stop
        kept from starting)."""
        if self.parallel and self._pool is None:
            self._queue = multiprocessing.Queue()
            self._pool = self._stack.enter_context(ProcessPoolExecutor(
                max_workers=self.workers, initializer=game_runs.init_worker,
                initargs=(self.stop, self._queue)))
        if self._pool is not None:
            return self._run_pool(fn, jobs)
        self._start_view()
        game_runs.use_here(self.stop, self.view.handle if self.view else None)
        ends = []
        try:
            for label, args in jobs:
                ends.append(_guarded(label, fn, *args))
                if self.view is not None:
                    self.view.handle(ends[-1])
        finally:
            game_runs.use_here(None, None)
        return ends

    def _drain(self, timeout: float) -> None:
        try:
            msg = self._queue.get(timeout=timeout)
            while True:
                if self.view is not None:
                    self.view.handle(msg)
                elif isinstance(msg, logging.LogRecord):
                    logging.getLogger(msg.name).handle(msg)
                msg = self._queue.get_nowait()
        except queue_mod.Empty:
            pass

    def _run_pool(self, fn: Callable[..., dict], jobs: list[Job]) -> list[dict]:
        assert self._pool is not None
        futures: dict[Future, str] = {}
        for label, args in jobs:
            futures[self._pool.submit(fn, *args)] = label
        self._start_view()
        ends: dict[str, dict] = {}
        pending, cancelled = set(futures), False
        while pending:
            self._drain(0.1)
            if self.stop.is_set() and not cancelled:
                cancelled = True
                for f in pending:
                    f.cancel()  # the queued games never start (those already handed over return "skipped")
            for f in [f for f in pending if f.done()]:
                pending.discard(f)
                label = futures[f]
                try:
                    ends[label] = f.result()
                except CancelledError:
                    ends[label] = {"kind": "skipped", "game": label}
                except Exception as e:  # a worker that died (killed, out of memory): that game's error
                    ends[label] = error_end(label, e)
                if self.view is not None:
                    self.view.handle(ends[label])
        self._drain(0.0)
        return [ends[label] for label, _ in jobs]


def _guarded(label: str, fn: Any, *args: Any) -> dict:
    """One job's end message, whatever happened to it (a crash is that game's error)."""
    try:
        return fn(*args)
    except Exception as e:
        return error_end(label, e)
