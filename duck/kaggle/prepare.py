"""What the notebook does while vLLM loads (~9 minutes for Flash-Next, FIELD §4): make every game.

Making a game spends no action (the game-creating RESET is not counted), and through the
gateway each make() is an HTTP call whose time would otherwise fall on the first minutes of
play. `PreparedSource` wraps the run's GameSource: `prepare(ids)` makes each game in a
background thread, in order, until a deadline, and `make(id)` hands out the game made ahead
(once; any other call goes to the source). The gateway allows one make() per game, and this is
that one. Kernels still start when play begins, bound to their game's session.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


class PreparedSource:
    """A GameSource whose games may have been made ahead; everything else is the source's."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self._ready: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._making: set[str] = set()  # the preparer's make() in progress
        self._claimed: set[str] = set()  # made (or being made) by a play: the preparer skips them
        self.errors: dict[str, str] = {}
        self.made: list[str] = []
        self.seconds = 0.0
        self._thread: threading.Thread | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)

    def prepare(self, game_ids: list[str], deadline: float | None = None) -> None:
        """Make every game, in order, until `deadline` (time.time()); errors are kept, not raised."""
        t0 = time.monotonic()
        for gid in game_ids:
            if deadline is not None and time.time() > deadline:
                break
            with self._cond:
                if gid in self._ready or gid in self._claimed:
                    continue
                self._making.add(gid)
            game = None
            try:
                game = self.source.make(gid)
            except Exception as e:  # a broken game: its play makes it again and records why
                self.errors[gid] = f"{type(e).__name__}: {e}"[:300]
            with self._cond:
                self._making.discard(gid)
                if game is not None:
                    self._ready[gid] = game
                    self.made.append(gid)
                self._cond.notify_all()
        self.seconds = round(time.monotonic() - t0, 1)
        log.info("made %d games ahead in %.1f s (%d failed)", len(self.made), self.seconds, len(self.errors))

    def prepare_in_background(self, game_ids: list[str], deadline: float | None = None) -> threading.Thread:
        self._thread = threading.Thread(target=self.prepare, args=(list(game_ids), deadline),
                                        name="duck-prepare-games", daemon=True)
        self._thread.start()
        return self._thread

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background preparation; True when it is done."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def make(self, game_id: str) -> Any:
        """The game made ahead, once; else made now (never two make() calls for one game
        at once: a game the preparer is making is waited for)."""
        with self._cond:
            while game_id in self._making:
                self._cond.wait(1.0)
            game = self._ready.pop(game_id, None)
            self._claimed.add(game_id)
        return game if game is not None else self.source.make(game_id)

    def report(self) -> dict[str, Any]:
        with self._cond:
            return {"made_ahead": len(self.made), "failed": dict(self.errors), "seconds": self.seconds,
                    "unused": len(self._ready)}
