"""Per-game JSONL run records, written and flushed line by line as play happens.

A record is the single source of truth for a game run: the score, the report and the replays
are computed from it without re-running anything. The rule: each line is flushed before the
next action is sent, so a run killed mid-game keeps every line up to its last action.

Lines (one JSON object each, `"type"` first): `header` (the game, its baselines, the policy,
seed, config, versions and the initial board), `action` (one per action: its number, the action,
the final board when it changed, the animation's frames before it, levels, state, time, the
policy's `info`), `event` (what is worth keeping and is not an action: `kind`, `message`, `data`)
and `end`. Every field: docs/runs.md, "Records". Reading is forgiving and says so: a garbage or
torn line is skipped and named in `Record.problems`, the lines after it kept; a file that cannot
be read becomes, in `read_records`, a record with state ERROR. Header fields registered in
`HEADER_EXTRAS` by a higher layer (the sandbox's isolation report) go into every header written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import time
import zlib
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from duck.game.actions import Action
from duck.game.source import Observation


def grid_hash(grid: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(grid, dtype=np.int8).tobytes()).hexdigest()[:16]


def pack_grid(grid: np.ndarray) -> str:
    """A board, or several boards of one shape stacked (an animation), as `HxW:` or `NxHxW:`
    and base64 of zlib over the int8 bytes: a 64x64 board in ~100-400 characters; an
    animation's frames share most cells, so each one after the first costs a few dozen bytes."""
    raw = np.ascontiguousarray(grid, dtype=np.int8)
    return "x".join(map(str, raw.shape)) + ":" + base64.b64encode(zlib.compress(raw.tobytes(), 6)).decode()


def unpack_grid(text: str) -> np.ndarray:
    """The array `pack_grid` packed, of its shape."""
    shape, data = text.split(":", 1)
    dims = tuple(int(v) for v in shape.split("x"))
    return np.frombuffer(zlib.decompress(base64.b64decode(data)), dtype=np.int8).reshape(dims)


# name -> a function whose result every header keeps under that name (registered by the
# layers above, e.g. duck.sandbox.wall.isolation: which OS layers confine the kernel here).
HEADER_EXTRAS: dict[str, Callable[[], Any]] = {}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("duck-arc3", "arc-agi", "arcengine", "numpy", "openai"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


@dataclass
class RecordWriter:
    """Appends lines to one game's record; every write is flushed to the OS at once."""

    path: Path
    t0: float = field(default_factory=time.monotonic)
    _last_hash: str | None = None
    _closed: bool = False

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")

    def _write(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def header(self, *, game_id: str, title: str, baselines: list[int] | None, obs: Observation | None,
               policy: str, seed: int | None, config: dict[str, Any] | None = None,
               pass_: int = 0) -> None:
        """The first line. `obs` None: the game could not be created (state ERROR, no board)."""
        line: dict[str, Any] = {"type": "header", "game_id": game_id, "title": title, "baselines": baselines,
                                "win_levels": obs.win_levels if obs else 0, "policy": policy, "seed": seed,
                                "pass": pass_, "config": config or {}, "versions": versions(),
                                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        for name, extra in HEADER_EXTRAS.items():
            line[name] = extra()
        if obs is None:
            line |= {"levels": 0, "state": "ERROR"}
        else:
            self._last_hash = grid_hash(obs.grid)
            line |= {"available_actions": obs.available_actions, "levels": obs.levels_completed,
                     "state": obs.state, "grid": pack_grid(obs.grid)}
        self._write(line)

    def action(self, i: int, action: Action, obs: Observation, info: dict[str, Any] | None = None) -> None:
        h = grid_hash(obs.grid)
        line: dict[str, Any] = {"type": "action", "i": i, "action": action.to_json(),
                                "frames": len(obs.frames), "hash": h}
        if h != self._last_hash:
            line["grid"] = pack_grid(obs.grid)
        if len(obs.frames) > 1 and len({np.shape(f) for f in obs.frames}) == 1:
            line["anim"] = pack_grid(np.stack(obs.frames[:-1]))
        line |= {"levels": obs.levels_completed, "state": obs.state, "t": self.elapsed()}
        if info:
            line["info"] = info
        self._last_hash = h
        self._write(line)

    def event(self, kind: str, message: str, data: Any = None) -> None:
        line: dict[str, Any] = {"type": "event", "kind": kind, "message": message, "t": self.elapsed()}
        if data is not None:
            line["data"] = data
        self._write(line)

    def end(self, reason: str, levels: int, actions: int, state: str) -> None:
        if self._closed:
            return
        self._write({"type": "end", "reason": reason, "levels": levels, "actions": actions,
                     "state": state, "t": self.elapsed()})
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._f.close()


@dataclass
class Record:
    """A record read back. `problems`: lines that were skipped (torn or garbage), or why the
    file could not be read at all."""

    header: dict[str, Any]
    actions: list[dict[str, Any]]
    events: list[dict[str, Any]]
    end: dict[str, Any] | None
    path: Path | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def game_id(self) -> str:
        return self.header["game_id"]

    def grids(self) -> Iterator[tuple[int, np.ndarray]]:
        """(action index, final grid) for the header (index 0) and every action."""
        if "grid" not in self.header:
            return
        grid = unpack_grid(self.header["grid"])
        yield 0, grid
        for a in self.actions:
            if "grid" in a:
                grid = unpack_grid(a["grid"])
            yield a["i"], grid


_NEEDS = {"header": ("game_id",), "action": ("i", "levels", "action"), "event": ("kind", "message"),
          "end": ("reason",)}


def read_record(path: str | Path) -> Record:
    """Every valid line of a record; a line that is not a JSON object of a known type with
    its fields (torn by a kill, garbage) is skipped and named in `problems`, and reading goes
    on. Raises OSError if the file cannot be read, ValueError if it has no header."""
    header, actions, events, end = None, [], [], None
    problems: list[str] = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                obj = None
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind not in _NEEDS or any(k not in obj for k in _NEEDS[kind]) or \
                    (kind == "action" and not (isinstance(obj["i"], int) and isinstance(obj["levels"], int))):
                if raw.strip():
                    problems.append(f"line {n}: {'torn' if not raw.endswith(b'\n') else 'not a record line'}")
                continue
            if kind == "header":
                if header is None:
                    header = obj
                else:
                    problems.append(f"line {n}: a second header (ignored)")
            elif kind == "action":
                actions.append(obj)
            elif kind == "event":
                events.append(obj)
            else:
                end = obj
    if header is None:
        raise ValueError(f"{path}: no header line; not a run record")
    return Record(header, actions, events, end, Path(path), problems)


def unreadable(path: Path, why: str) -> Record:
    """The stand-in for a record that cannot be read: its game, state ERROR, the reason."""
    header = {"type": "header", "game_id": path.stem, "title": path.stem, "baselines": [], "win_levels": 0,
              "levels": 0, "state": "ERROR"}
    event = {"type": "event", "kind": "error", "message": f"record unreadable: {why}"}
    return Record(header, [], [event], None, path, [f"unreadable: {why}"])


def read_records(run_dir: str | Path) -> list[Record]:
    """Every record of a run folder; one that cannot be read is `unreadable(...)`, not an error."""
    folder = Path(run_dir) / "records"
    out = []
    for p in sorted(folder.glob("*.jsonl")):
        try:
            out.append(read_record(p))
        except (OSError, ValueError) as e:
            out.append(unreadable(p, f"{type(e).__name__}: {e}"))
    return out
