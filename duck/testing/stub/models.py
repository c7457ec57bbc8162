"""Scripted models for the stub server (`reply(request) -> dict`).

* `FixedModel(replies)`: the given replies in order (then 410 Gone, or a loop). A reply is a
  dict: `content`, `reasoning`, `code` (one `python` call) or `tool_calls`
  ([{"name", "arguments"}]), `finish_reason`, and test knobs: `status` (answer with that
  HTTP error), `delay_s` (before the first byte), `stall_s` (mid-stream, after the
  reasoning), or a callable `request -> dict`.
* `TraceModel(turns)`: replays one Duck run from ../shared/duck-traces (turns as
  duck.testing.stub.traces.load_trace gives them): each recorded model response in order, its
  visible text as content, reasoning of the recorded length (the text itself was not
  recorded), and its Python snippet as the tool call (the number of actions each snippet
  executed in the record is the replay kernel's business: duck.lab.replay_caps).
* `SolutionModel(games_dir)`: plays the bundled games' solution.json, one conversation per game.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

from duck.game.actions import OUR_DIALECT_NAMES, Action

class FixedModel:
    """The given replies in order; then `loop` them, or answer 410 Gone."""

    def __init__(self, replies: list[dict[str, Any] | Callable[[dict], dict]], loop: bool = False) -> None:
        self.replies = list(replies)
        self.loop = loop
        self.i = 0
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.i >= len(self.replies):
                if not self.loop or not self.replies:
                    return {"status": 410, "error": "the scripted replies are used up"}
                self.i = 0
            r = self.replies[self.i]
            self.i += 1
        return r(request) if callable(r) else dict(r)


def _filler(n: int, seed: int) -> str:
    """`n` characters of stand-in reasoning (the traces keep only its length)."""
    if n <= 0:
        return ""
    base = f"(reasoning {seed}: not recorded in the trace, only its length) "
    return (base * (n // len(base) + 1))[:n]


def trace_replies(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One reply per recorded model response of a Duck run, in order. The tool calls carry only
    what the model wrote; the recorded caps are the replay kernel's (duck.lab.replay_caps)."""
    out: list[dict[str, Any]] = []
    for t in turns:
        content = t.get("content") or ""
        pos = 0
        responses = t.get("model_responses") or [{}]
        for ri, r in enumerate(responses):
            n = r.get("content_chars") or 0
            text, pos = content[pos:pos + n], pos + n + (2 if n else 0)
            calls = [c for c in t.get("calls", []) if c.get("response_index", 0) == ri]
            tool_calls = []
            for c in calls:
                args = dict(c.get("other_arguments") or {})
                if not c.get("code_missing"):
                    args = {"code": c["code"], **args}
                tool_calls.append({"name": "python", "arguments": json.dumps(args)})
            finish = r.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
            out.append({"content": text, "tool_calls": tool_calls, "finish_reason": finish,
                        "reasoning": _filler(r.get("reasoning_chars") or 0, len(out))})
    return out


class TraceModel(FixedModel):
    def __init__(self, turns: list[dict[str, Any]]) -> None:
        super().__init__(trace_replies(turns))


def action_code(actions: list[list[int]]) -> str:
    """Python that plays recorded actions ([id] or [6, x, y]) through the kernel's action()."""
    items = [repr(OUR_DIALECT_NAMES.item(Action.from_json(a))) for a in actions]
    return f"result = action([{', '.join(items)}])"


class SolutionModel:
    """Plays the bundled games' solution.json, one conversation per game: each level is one
    turn with a look-around call (notes in the text) and then one call playing the level."""

    def __init__(self, games_dir: str | Path) -> None:
        self.solutions: dict[str, list[list[list[int]]]] = {}
        for meta in Path(games_dir).rglob("metadata.json"):
            sol = meta.parent / "solution.json"
            if sol.exists():
                self.solutions[json.loads(meta.read_text())["game_id"]] = json.loads(sol.read_text())["levels"]
        self.cursor: dict[str, int] = {}
        self.replies: list = []  # (for the command line's banner)
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        session = request.get("_session", "")
        game = session.rsplit(":", 1)[0]
        levels = next((v for k, v in self.solutions.items() if k == game or k.split("-")[0] == game), None)
        if levels is None:
            return {"status": 404, "error": f"no solution for conversation {session!r}"}
        with self.lock:
            i = self.cursor.get(session, 0)
            self.cursor[session] = i + 1
        level, step = divmod(i, 2)
        if level >= len(levels):
            return {"status": 410, "error": "the solution is played out"}
        if step == 0:
            return {"content": f"World model: level {level + 1} of {game}.\nPlan: play the known solution.",
                    "reasoning": "Look first.", "code": "print(current_frame.level, valid_actions)"}
        return {"content": f"Goal model: reach the end of level {level + 1}.",
                "code": action_code(levels[level])}
