"""Per-game conversation files: every message the model saw and wrote (DESIGN §4, issue 13).

The record (duck.play.record) says what was played; the conversation says why. Beside a
record `RUN/records/<game>.jsonl` the conversation is `RUN/conversations/<game>.jsonl`,
written and flushed line by line while the game is played (a killed run keeps every line up
to its last), and gzipped to `<game>.jsonl.gz` when the game ends. `play_game` owns the
writer and hands it to the policy through `Session.conversation`; policies open no files.

Lines (one JSON object each, `"type"` first, `"t"` seconds since the game started):

* `start`: game_id, pass, seed, the record's file name, and what the agent adds once: the
  model name, the sampling, the output cap, the tool schema (`tools`), the context budget.
* `message`: `id` (0, 1, 2, ... in file order), `turn`, optional `kind` (`system`, `carry`:
  the message the context carries past a trim; `summary` in older files), `call`, `result`
  (a tool result's kernel call: kind, actions), and `message`: the message exactly as
  appended to the context, with two encodings undone by
  `decode`: a board image the record can rebuild bit for bit is stored as
  `{"type": "image_url", "image_url": {"board": {"step": N, "scale": S}}}` (the record's
  grid after action N through duck.game.frames.grid_png, see `Conversation.message`), any
  other image the agent made from grids (a diff, a fatal frame, a mid-animation frame:
  duck.game.images) as `{"image_url": {"render": {"kind": K, "scale": S, "grids": [packed,
  ...]}}}` (duck.play.record.pack_grid; `remember_image` says how it was made), and a
  `reasoning_content` equal to `reasoning` is left out with `"rc": 1`.
* `request`: one model call: `n` (0, 1, ...), `ids` (the messages sent, as inclusive ranges
  [[first, last], ...] of message ids), `turn`, `call`, `seed`, `estimate`.
* `reply`: `n` (its request), `message` (the id of the assistant message appended, which
  holds the content, reasoning and kept tool calls as received) and the reply's numbers:
  finish_reason, cut, prompt/completion/cached tokens, latency_s, first_token_s, url,
  attempts, seed, and `dropped` (tool calls the client did not keep, with why and their text);
  for a cut reply whose message keeps only the tail of its thinking, `thinking_dropped` (the
  characters left out) and `reasoning` (all of it, as received).
* `error`: `n`, `error` (class name), `status`, `message`: a model call that failed.
* `event`: `kind` and fields: `evict` (a trim: turns and message ids dropped, the id of the
  carried message, the prompt's tokens before and after), `drop_turn` (a turn that alone
  outgrew the budget), `turn_end` (actions, outcome), anything else worth keeping.
* `notes`: `turn` and what changed in the model's `notes` dict whenever it changed: in
  `sections`, the keys `set` to a new value and those `unset` (`apply_notes` folds them back;
  files from before issue 40 also have `extra`, `level` and `carried_from`, of the text notes).
* `end`: `reason`, `t`.

`read_conversation` reads either form and tolerates a torn last line (SIGKILL mid-write);
`Conversation.request_messages(n, record)` rebuilds the exact message list of request n.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from duck.files import replacing
from duck.game.frames import grid_png
from duck.game.images import png_size
from duck.game.images import render as render_image
from duck.play.record import pack_grid, unpack_grid

log = logging.getLogger(__name__)

DATA_PNG = "data:image/png;base64,"


def conversation_path(record_path: str | Path) -> Path:
    """Where the conversation of `record_path` is written: `RUN/conversations/<game>.jsonl`
    for `RUN/records/<game>.jsonl`, else a `conversations/` folder beside the record (never
    `*.jsonl` inside `records/`, which readers of records glob)."""
    record_path = Path(record_path)
    folder = record_path.parent
    base = folder.with_name("conversations") if folder.name == "records" else folder / "conversations"
    return base / f"{record_path.stem}.jsonl"


def find_conversation(record_path: str | Path) -> Path | None:
    """The conversation file of a record, finished (.gz) or live, or None."""
    live = conversation_path(record_path)
    gz = live.with_name(live.name + ".gz")
    return gz if gz.exists() else live if live.exists() else None


def record_of(conversation: str | Path) -> Path:
    """The record beside a conversation file (inverse of `conversation_path`): the run
    folder's `records/<game>.jsonl`, or a record in the folder above `conversations/`."""
    p = Path(conversation)
    name = p.name.removesuffix(".gz")
    in_records = p.parent.with_name("records") / name
    flat = p.parent.parent / name
    return flat if flat.exists() and not in_records.exists() else in_records


def ranges(ids: Iterable[int]) -> list[list[int]]:
    """[0, 1, 2, 5, 6] → [[0, 2], [5, 6]]."""
    out: list[list[int]] = []
    for i in ids:
        if out and out[-1][1] + 1 == i:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def unranges(spans: list[list[int]]) -> list[int]:
    return [i for a, b in spans for i in range(a, b + 1)]


class ConversationWriter:
    """Appends one game's conversation. `path` None: a writer that writes nothing (ids are
    still handed out, so a context can use it unchanged). `board()` gives (actions so far,
    grid): an image equal to that grid's PNG is stored as a reference to the record's step."""

    def __init__(self, path: str | Path | None, *, board: Callable[[], tuple[int, np.ndarray]] | None = None,
                 start: dict[str, Any] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.board = board
        self.t0 = time.monotonic()
        self._start = dict(start or {})
        self._f: Any = None
        self._closed = False
        self.ids = 0  # next message id
        self.requests = 0  # next request number
        self._png_cache: tuple[int, int, bytes] | None = None  # (step, scale, png)
        self._made: dict[str, dict[str, Any]] = {}  # data URL -> how the agent made it (remember_image)
        self.bytes = 0

    @property
    def enabled(self) -> bool:
        return self.path is not None

    # -- lines --------------------------------------------------------------------------
    def _write(self, obj: dict[str, Any]) -> None:
        if self.path is None or self._closed:
            return
        try:
            if self._f is None:  # lazily: a policy that never talks to a model leaves no file
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._f = open(self.path, "a", encoding="utf-8")
                if obj.get("type") != "start":
                    self._line({"type": "start", **self._start, "t": 0.0})
            self._line(obj)
        except (OSError, ValueError) as e:  # a full disk must not end the game: stop writing, say so once
            log.warning("conversation %s: %s; no more lines are written", self.path, e)
            self._closed = True

    def _line(self, obj: dict[str, Any]) -> None:
        # ASCII escapes: a lone surrogate in a model's text cannot break the UTF-8 file.
        text = json.dumps(obj, separators=(",", ":"), default=str) + "\n"
        self._f.write(text)
        self._f.flush()
        self.bytes += len(text)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def begin(self, **fields: Any) -> None:
        """The `start` line, with what the policy adds (model, sampling, tools, budget)."""
        if self._f is None:
            self._write({"type": "start", **self._start, **fields, "t": self.elapsed()})
        else:
            self.event("start", **fields)

    def message(self, message: dict[str, Any], **meta: Any) -> int:
        """One message as appended to the context; returns its id."""
        i, self.ids = self.ids, self.ids + 1
        if self.enabled:
            line: dict[str, Any] = {"type": "message", "id": i, **meta}
            msg = self.encode(message)
            if "reasoning_content" in message and message.get("reasoning_content") == message.get("reasoning"):
                msg.pop("reasoning_content")
                line["rc"] = 1
            self._write(line | {"message": msg, "t": self.elapsed()})
        return i

    def request(self, ids: list[int], **meta: Any) -> int:
        n, self.requests = self.requests, self.requests + 1
        self._write({"type": "request", "n": n, "ids": ranges(ids), **meta, "t": self.elapsed()})
        return n

    def reply(self, n: int, message_id: int | None, reply: Any) -> None:
        """`reply`: a duck.llm.client.Reply (its stats, seed and dropped calls in full)."""
        stats = {k: v for k, v in reply.stats().items() if k not in ("dropped_calls",)}
        # A cut reply's message keeps only the tail of its thinking: the line keeps all of it.
        full = {"reasoning": reply.reasoning} if stats.get("thinking_dropped") else {}
        self._write({"type": "reply", "n": n, "message": message_id, **stats, "seed": reply.seed,
                     "dropped": list(reply.dropped), **full, "t": self.elapsed()})

    def error(self, n: int, exc: BaseException) -> None:
        self._write({"type": "error", "n": n, "error": type(exc).__name__, "status": getattr(exc, "status", None),
                     "message": str(exc)[:2000], "t": self.elapsed()})

    def event(self, kind: str, **data: Any) -> None:
        self._write({"type": "event", "kind": kind, **data, "t": self.elapsed()})

    def notes(self, turn: int, notes: dict[str, Any], before: dict[str, Any] | None = None) -> None:
        """What changed in the model's `notes` dict since `before`: keys set to a new value, keys unset."""
        old = before or {}
        change = {"set": {k: v for k, v in notes.items() if old.get(k) != v}, "unset": [k for k in old if k not in notes]}
        self._write({"type": "notes", "turn": turn, "sections": change, "t": self.elapsed()})

    def close(self, reason: str | None = None) -> Path | None:
        """The `end` line, then gzip (the live file stays until the .gz is complete).
        Returns the finished file, or None when nothing was written. Never raises."""
        if self._f is None or self._f.closed:
            self._closed = True
            return None
        self._write({"type": "end", "reason": reason, "t": self.elapsed()})
        self._closed = True
        try:
            self._f.close()
            gz = self.path.with_name(self.path.name + ".gz")
            with (replacing(gz) as tmp, open(self.path, "rb") as src,
                  gzip.open(tmp, "wb", compresslevel=6) as dst):
                shutil.copyfileobj(src, dst)
            self.path.unlink()
            return gz
        except OSError as e:  # the live file is still there and readable
            log.warning("conversation %s: could not finish (%s)", self.path, e)
            return self.path if self.path.exists() else None

    # -- images -------------------------------------------------------------------------
    def remember_image(self, url: str, kind: str, grids: Any, scale: int) -> None:
        """How the image at data URL `url` was made (duck.game.images.render(kind, grids,
        scale)): the next message holding it stores that instead of the PNG."""
        if self.enabled:
            self._made[url] = {"kind": kind, "scale": int(scale), "grids": [pack_grid(g) for g in grids]}

    def encode(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message with board images replaced by references to the record's step."""
        content = message.get("content")
        if not isinstance(content, list):
            return dict(message)
        return dict(message, content=[self._part(p) for p in content])

    def _part(self, part: Any) -> Any:
        url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) else None
        if not (isinstance(url, str) and url.startswith(DATA_PNG)):
            return part
        made = self._made.pop(url, None)
        if self.board is None:
            return self._made_part(part, made)
        png = base64.b64decode(url[len(DATA_PNG):])
        step, grid = self.board()
        scale = png_size(png)[0] // max(1, np.asarray(grid).shape[1])
        if scale < 1:
            return part
        if self._png_cache is None or self._png_cache[:2] != (step, scale):
            self._png_cache = (step, scale, grid_png(grid, scale))
        if self._png_cache[2] != png:  # not the board the record has: how it was made, else the image itself
            return self._made_part(part, made)
        return self._made_part(part, {"step": step, "scale": scale}, "board")

    @staticmethod
    def _made_part(part: dict[str, Any], made: dict[str, Any] | None, key: str = "render") -> dict[str, Any]:
        if made is None:
            return part
        image = {k: v for k, v in part["image_url"].items() if k != "url"}
        return dict(part, image_url=image | {key: made})


def apply_notes(state: dict[str, Any], line: dict[str, Any]) -> dict[str, Any]:
    """The notes after a `notes` line, from the notes before it (start from {}); `sections`
    holds the model's `notes` dict (`extra`, `level`, `carried_from`: older files' text notes)."""
    out = {"level": line.get("level"), "carried_from": dict(line.get("carried_from") or {})}
    for key in ("sections", "extra"):
        d = dict(state.get(key) or {})
        change = line.get(key) or {}
        d.update(change.get("set") or {})
        for k in change.get("unset") or []:
            d.pop(k, None)
        out[key] = d
    return out


NULL = ConversationWriter(None)  # for contexts and sessions that keep no conversation


# ---------------------------------------------------------------------------------------
# Reading

@dataclass
class Conversation:
    """A conversation file read back (see the module docstring for the lines)."""

    path: Path | None
    start: dict[str, Any]
    lines: list[dict[str, Any]]
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)  # id → message line
    requests: list[dict[str, Any]] = field(default_factory=list)
    replies: dict[int, dict[str, Any]] = field(default_factory=dict)  # request n → reply line
    errors: dict[int, dict[str, Any]] = field(default_factory=dict)  # request n → error line
    end: dict[str, Any] | None = None
    torn: bool = False  # the last line was cut (a killed run)

    @property
    def game_id(self) -> str:
        return self.start.get("game_id", "")

    def message(self, i: int, grids: dict[int, np.ndarray] | None = None) -> dict[str, Any]:
        """Message `i` as it was sent. Board references are rebuilt from `grids` (step →
        grid, e.g. dict(record.grids())); without them they stay references."""
        line = self.messages[i]
        msg = dict(line["message"])
        if line.get("rc"):
            msg["reasoning_content"] = msg.get("reasoning")
        if isinstance(msg.get("content"), list):
            msg["content"] = [decode_part(p, grids) for p in msg["content"]]
        return msg

    def request_messages(self, n: int, grids: dict[int, np.ndarray] | None = None) -> list[dict[str, Any]]:
        """The exact message list of request `n`."""
        return [self.message(i, grids) for i in unranges(self.requests[n]["ids"])]

    def reply_of(self, n: int) -> dict[str, Any] | None:
        """Request n's reply as received: the reply line joined with its assistant message
        (content, reasoning, tool calls kept, plus the dropped ones)."""
        r = self.replies.get(n)
        if r is None:
            return None
        msg = self.messages[r["message"]]["message"] if r.get("message") is not None else {}
        return {**r, "content": msg.get("content") or "", "reasoning": r.get("reasoning") or msg.get("reasoning") or "",
                "tool_calls": [{"id": c.get("id"), "name": c["function"]["name"],
                                "arguments": c["function"]["arguments"]} for c in msg.get("tool_calls") or []]}


def decode_part(part: Any, grids: dict[int, np.ndarray] | None) -> Any:
    """An image part as it was sent: a board reference through the record's `grids` (kept
    as a reference without them), an image made from grids rendered again."""
    spec = part.get("image_url") if isinstance(part, dict) else None
    made = spec.get("render") if isinstance(spec, dict) else None
    if made is not None:
        png = render_image(made["kind"], [unpack_grid(g) for g in made["grids"]], made["scale"])
        image = {k: v for k, v in spec.items() if k != "render"}
        return dict(part, image_url={"url": DATA_PNG + base64.b64encode(png).decode(), **image})
    board = spec.get("board") if isinstance(spec, dict) else None
    if board is None or grids is None:
        return part
    image = {k: v for k, v in part["image_url"].items() if k != "board"}
    png = grid_png(grids[board["step"]], board["scale"])
    return dict(part, image_url={"url": DATA_PNG + base64.b64encode(png).decode(), **image})


def read_conversation(path: str | Path) -> Conversation:
    """Read a conversation file (.jsonl or .jsonl.gz); a torn last line is ignored."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    conv = Conversation(path, {}, [])
    with opener(path, "rt", encoding="utf-8") as f:
        for raw in f:
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                conv.torn = True
                break  # a run killed mid-write: everything before is intact
            if not raw.endswith("\n"):
                conv.torn = True
            kind = obj.get("type")
            conv.lines.append(obj)
            if kind == "start" and not conv.start:
                conv.start = obj
            elif kind == "message":
                conv.messages[obj["id"]] = obj
            elif kind == "request":
                conv.requests.append(obj)
            elif kind == "reply":
                conv.replies[obj["n"]] = obj
            elif kind == "error":
                conv.errors[obj["n"]] = obj
            elif kind == "end":
                conv.end = obj
    if not conv.start:
        raise ValueError(f"{path}: no start line; not a conversation file")
    return conv
