"""The spend guard: what one `duck play` command's model requests may use, and the clean stop
when they have used it (or when the provider refuses the key).

Every model client of the command appends each reply's usage (tokens, and `usage.cost` where
the provider reports one) to one ledger file in a single write, so that the games' processes
share it without a lock. At a cap, or on 401/403/402, the guard writes a `stop` line and sets
the run's stop event, as on Ctrl-C (docs/hosted.md, "The spend guard"). `install(guard)` makes
it the guard of the clients made afterwards; without one nothing is counted (Kaggle, benches).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

LEDGER = "spend.jsonl"  # in the run folder: one line per model request of the current command


class Guard:
    """One command's ledger (`path`), its caps (0: none) and the stop event it sets."""

    def __init__(self, path: str | Path, *, max_tokens: int = 0, max_cost: float = 0.0,
                 stop: Any = None) -> None:
        self.path, self.max_tokens, self.max_cost, self.stop = Path(path), max_tokens, max_cost, stop
        self._pos, self._rest = 0, b""
        self.requests, self.tokens, self.cost, self.stopped = 0, 0, 0.0, None

    @staticmethod
    def begin(path: str | Path) -> None:
        """A new command's ledger: empty (what earlier commands spent is in their records), the
        owner's only (the model's code runs under another uid where the host is root)."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))

    def add(self, stats: dict[str, Any]) -> None:
        """One reply's usage (`Reply.stats()`); stops the run once a cap is reached."""
        tokens = (stats.get("prompt_tokens") or 0) + (stats.get("completion_tokens") or 0)
        line = {"tokens": tokens, "cost": stats.get("cost")}
        self._append(line)
        self.read()
        if self.stopped is None:
            over = self.over()
            if over:
                self.halt(over)

    def over(self) -> str | None:
        """Why the caps are reached, or None."""
        if self.max_tokens and self.tokens >= self.max_tokens:
            return (f"spend limit: {self.tokens:,} tokens in {self.requests} model requests, "
                    f"model.max_total_tokens is {self.max_tokens:,}")
        if self.max_cost and self.cost >= self.max_cost:
            return f"spend limit: ${self.cost:.4f} in {self.requests} model requests, model.max_cost is ${self.max_cost:g}"
        return None

    def halt(self, reason: str) -> None:
        """Stop the run (every game at its next action) for `reason`, and say so in the ledger."""
        self._append({"stop": reason})
        self.read()
        if self.stop is not None:
            self.stop.set()

    def reason(self) -> str | None:
        """The first stop reason any process wrote, or None."""
        self.read()
        return self.stopped

    def read(self) -> None:
        """Take in the lines written since the last read (by any process)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = self._rest + f.read()
        except OSError:
            return
        self._pos += len(data) - len(self._rest)
        *lines, self._rest = data.split(b"\n")  # (a line still being written waits for the next read)
        for raw in lines:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if "stop" in doc:
                self.stopped = self.stopped or str(doc["stop"])
                continue
            self.requests += 1
            self.tokens += int(doc.get("tokens") or 0)
            self.cost += float(doc.get("cost") or 0.0)

    def _append(self, doc: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(doc) + "\n").encode())  # one write: whole lines whatever the processes
        finally:
            os.close(fd)


_current: Guard | None = None


def install(guard: Guard | None) -> None:
    """The guard of the model clients made from now on in this process (None: no guard)."""
    global _current
    _current = guard


def current() -> Guard | None:
    return _current
