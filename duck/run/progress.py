"""What `duck play` shows while it plays: one live line per game on a terminal, log lines
otherwise, and a summary at the end.

On a terminal (stderr is a tty that redraws, `redraws`; rich, imported only then) a live
table redraws a few times a second: per game its state, level, actions, score so far and the
policy in use, and "explorer: model unreachable" once the model's fallback took over; a header line with the
games done, playing and queued and the mean score so far; the queued games are one line
(a run of 110 games stays inside the screen). At the end the live table gives way to the
summary table of every game. Anywhere else (a pipe, a file, CI) nothing redraws: one line per
game as it ends, the run's notices (Ctrl-C, a full disk, the fallback) once each, and a
closing line. Log records from the worker processes come through the same queue and are
printed above the live table, never through it.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, TextIO

UNREACHABLE = "model unreachable"  # what the line says when the fallback took over


def redraws(stream: TextIO) -> bool:
    """Whether a live table can redraw on `stream`: rich's own rule (a tty, TERM neither
    "dumb" nor "unknown", TTY_COMPATIBLE and FORCE_COLOR honoured). On a tty where rich would
    not redraw (TERM=dumb: an editor's shell, some CI runners) the live table would show
    nothing until the end, so such a terminal gets the log lines instead."""
    if not stream.isatty():
        return False
    from rich.console import Console  # only on a tty (~50 ms to import)
    console = Console(file=stream)
    return console.is_terminal and not console.is_dumb_terminal


@dataclass
class Row:
    game: str
    state: str = "queued"  # queued, playing, done, stopped, error, disk_full, skipped
    levels: int = 0
    levels_total: int = 0
    actions: int = 0
    score: float = 0.0
    policy: str = ""
    fallback: str | None = None
    error: str | None = None
    end_reason: str = ""

    @property
    def policy_shown(self) -> str:
        return f"explorer: {UNREACHABLE}" if self.fallback else self.policy


class RunView:
    """The run's display. `handle(message)` takes a game's messages (duck.run.games) and log
    records; `notice(text)` a run-wide line (said once); `close()` ends the live table and
    prints the summary. `prog` starts every line (`duck play`, `duck ab`); `group(row name)`
    names a row's group (`duck ab`: the arm), whose mean scores the header line shows apart;
    `unit` what a row is (`duck ab`: a run); `add(names)` adds rows (the adaptive rounds of `duck ab`).
    Each score shown says what it is the mean over (the run's own score is duck.run.summary's)."""

    def __init__(self, games: list[str], *, title: str, stream: TextIO | None = None,
                 live: bool | None = None, prog: str = "duck play",
                 group: Callable[[str], str] | None = None, unit: str = "game") -> None:
        self.stream = stream or sys.stderr
        self.live_mode = redraws(self.stream) if live is None else live
        self.title, self.prog, self.group, self.unit = title, prog, group, unit
        self.rows = {g: Row(g) for g in games}
        self.notices: list[str] = []
        self.ended = 0
        self._lock = threading.Lock()
        self._live: Any = None
        self._console: Any = None
        self._fallback_said = False
        self._started = False
        self._pending: list[str] = []  # notices given before start(): said right after the title

    def add(self, names: list[str]) -> None:
        with self._lock:
            for n in names:
                self.rows.setdefault(n, Row(n))

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self.live_mode:
            from rich.console import Console  # only on a terminal (~50 ms to import)
            from rich.live import Live
            self._console = Console(file=self.stream, highlight=False)
            self._live = Live(console=self._console, get_renderable=self._table, refresh_per_second=4,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._say(f"{self.prog}: {self.title}")
        self._started = True
        for text in self._pending:
            self._print_notice(text)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._console.print(self._table(final=True))
        else:
            self._say(f"{self.prog}: {self._totals(final=True)}")

    def kill_line(self, text: str) -> None:
        """The second Ctrl-C: no redraw, no summary, one line, the cursor back."""
        live, self._live = self._live, None
        if live is not None:
            try:
                self.stream.write("\x1b[?25h\n")
            except Exception:
                pass
        self._say(text)

    # --- messages -------------------------------------------------------------------------

    def handle(self, msg: Any) -> None:
        if isinstance(msg, logging.LogRecord):
            self._log(msg)
            return
        row = self.rows.get(msg.get("game"))
        if row is None:
            return
        kind = msg.get("kind")
        with self._lock:
            if kind == "start":
                row.state, row.policy = "playing", msg.get("policy", "")
                row.levels_total = msg.get("levels_total", 0)
            elif kind == "progress" and row.state in ("queued", "playing"):
                row.state = "playing"
                row.levels, row.actions, row.score = msg["levels"], msg["actions"], msg["score"]
            elif kind == "fallback":
                row.fallback = msg.get("message")
            elif kind in ("end", "skipped"):
                self._end(row, msg)
        if kind == "fallback" and not self._fallback_said:
            self._fallback_said = True
            self.notice(f"{row.game}: {msg.get('message')} (said once; each game's line shows it)")
        if kind == "end" and not self.live_mode:
            self._say(f"{self.prog}: [{self.ended}/{len(self.rows)}] {self._row_text(row)}")

    def _end(self, row: Row, msg: dict) -> None:
        if msg.get("kind") == "skipped":
            row.state = "skipped"
            return
        self.ended += 1
        row.levels, row.actions = msg.get("levels", row.levels), msg.get("actions", row.actions)
        row.score, row.error = msg.get("score", row.score), msg.get("error")
        row.end_reason = msg.get("end_reason", "")
        row.policy = msg.get("policy") or row.policy
        row.fallback = msg.get("fallback") or row.fallback
        row.state = {"stopped": "stopped", "disk_full": "disk_full", "error": "error"}.get(row.end_reason, "done")

    def notice(self, text: str) -> None:
        """A run-wide line: said once, kept for the summary."""
        if text in self.notices:
            return
        self.notices.append(text)
        if not self._started:
            self._pending.append(text)
        else:
            self._print_notice(text)

    def _print_notice(self, text: str) -> None:
        if self._live is not None:
            self._console.print(f"{self.prog}: {text}", markup=False)
        else:
            self._say(f"{self.prog}: {text}")

    # --- rendering ------------------------------------------------------------------------

    def _log(self, record: logging.LogRecord) -> None:
        logger = logging.getLogger(record.name)
        if not logger.isEnabledFor(record.levelno):
            return
        if self._live is not None:
            self._console.print(logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record), markup=False)
        else:
            logger.handle(record)

    def _say(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or full stream must not stop the run
            pass

    def _row_text(self, row: Row) -> str:
        levels = f"{row.levels}/{row.levels_total}" if row.levels_total else str(row.levels)
        text = f"{row.game}: {row.state}, levels {levels}, {row.actions} actions, score {row.score:.3f} ({row.policy_shown})"
        return text + (f": {row.error}" if row.error else "")

    def _counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows.values():
            out[r.state] = out.get(r.state, 0) + 1
        return out

    def _totals(self, final: bool = False) -> str:
        c = self._counts()
        played = [r for r in self.rows.values() if r.state not in ("queued", "skipped")]
        mean = sum(r.score for r in played) / len(played) if played else 0.0
        parts = [f"{c.get('done', 0)}/{len(self.rows)} {self.unit}s done"]
        for state, label in (("playing", "playing"), ("stopped", "stopped mid-game"), ("error", "with an error"),
                             ("disk_full", "cut by the full disk"), ("queued", "queued" if not final else "not started"),
                             ("skipped", "not started")):
            if c.get(state):
                parts.append(f"{c[state]} {label}")
        fell = sum(1 for r in self.rows.values() if r.fallback)
        if fell:
            parts.append(f"{fell} finished by the explorer: {UNREACHABLE}")
        over = f"the {len(played)} {self.unit}{'' if len(played) == 1 else 's'}"
        text = ", ".join(parts) + (f"; mean score {mean:.3f}% over {over} this command played" if final else
                                   f"; mean score so far {mean:.3f}% over {over} started")
        if self.group is not None and played:
            groups: dict[str, list[float]] = {}
            for r in played:
                groups.setdefault(self.group(r.game), []).append(r.score)
            text += " (" + ", ".join(f"{k} {sum(v) / len(v):.3f}% over {len(v)}" for k, v in sorted(groups.items())) + ")"
        return text

    def _table(self, final: bool = False) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text
        with self._lock:
            rows = list(self.rows.values())
            head = f"{self.title}\n{self._totals(final)}" + ("" if final else " · Ctrl-C stops")
        table = Table(box=None, pad_edge=False, expand=False)
        for col in ("game", "state", "level", "actions", "score", "policy"):
            table.add_column(col, justify="right" if col in ("level", "actions", "score") else "left")
        shown = rows
        if not final:
            active = [r for r in rows if r.state == "playing"]
            ended = [r for r in rows if r.state not in ("queued", "playing", "skipped")]
            room = max(3, (self._console.size.height if self._console else 24) - 6 - len(active))
            shown = ended[-room:] + active
            queued = sum(1 for r in rows if r.state == "queued")
        for r in shown:
            levels = f"{r.levels}/{r.levels_total}" if r.levels_total else str(r.levels)
            state = {"skipped": "not started", "disk_full": "disk full"}.get(r.state, r.state)
            state += f" ({r.error[:60]})" if r.error and final else ""
            table.add_row(r.game, state, levels, str(r.actions), f"{r.score:.3f}", r.policy_shown)
        if not final and queued:
            table.add_row(f"… {queued} queued", "", "", "", "", "")
        return Group(Text(head, style="bold"), table)
