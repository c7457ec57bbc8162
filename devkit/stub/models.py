"""Scripted models for the stub server (`reply(request) -> dict`).

* `FixedModel(replies)`: the given replies in order (then 410 Gone, or a loop; `requests` keeps
  the bodies it answered). A reply is a dict (`content`, `reasoning`, `code` or `tool_calls`,
  `finish_reason`, and test knobs: docs/workbench.md) or a callable `request -> dict`.
* `TraceModel(turns)`: replays one Duck run from ../shared/duck-traces: each recorded response
  in order, its visible text as content, reasoning of the recorded length (the text itself was
  not recorded), its Python snippet as the tool call (the number of actions each snippet played
  is the replay kernel's business: devkit.replay.caps).
* `SolutionModel(games_dir)`: plays the bundled games' solution.json, one conversation per game.
* `ConversationModel(conversations)`: serves the replies of saved conversations
  (duck.play.conversation) in order, one file per game, and checks each request against the one
  recorded (`mismatches`): a conversation from a real run becomes a regression test.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from duck.game.actions import MODEL_NAMES, Action

if TYPE_CHECKING:  # (imported where used: numpy and arc_agi would slow the stand-in vLLM's start)
    from duck.play.conversation import Conversation

class FixedModel:
    """The given replies in order; then `loop` them, or answer 410 Gone."""

    def __init__(self, replies: list[dict[str, Any] | Callable[[dict], dict]], loop: bool = False) -> None:
        self.replies = list(replies)
        self.loop = loop
        self.i = 0
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every request body answered with a reply (not the 410s), in order

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.i >= len(self.replies):
                if not self.loop or not self.replies:
                    return {"status": 410, "error": "the scripted replies are used up"}
                self.i = 0
            self.requests.append(request)
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
    what the model wrote; the recorded caps are the replay kernel's (devkit.replay.caps)."""
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
    items = [repr(MODEL_NAMES.item(Action.from_json(a))) for a in actions]
    return f"result = action([{', '.join(items)}])"


class SolutionModel:
    """Plays the bundled games' solution.json, one conversation per game: each level is one
    turn with a look-around call (writing the model's `notes` dict) and then one call playing
    the level."""

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
                    "reasoning": "Look first.",
                    "code": f"notes['Plan'] = 'play the known solution of level {level + 1}'\n"
                            "print(current_frame.level, valid_actions)"}
        return {"content": f"Goal model: reach the end of level {level + 1}.",
                "code": action_code(levels[level])}


# The kernel's timers in tool results: the only part of a replayed request that may differ.
_TIMERS = re.compile(r'("(?:run_elapsed_seconds|time_remaining_seconds)":\s*)(?:-?[0-9.]+(?:[eE][-+]?[0-9]+)?|null)')


def comparable(messages: list[dict[str, Any]], images: bool = True) -> list[dict[str, Any]]:
    """Messages with the kernel's timer values blanked (they differ from run to run), and
    without `images` every image reduced to its type (no record to rebuild them from)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            m = dict(m, content=_TIMERS.sub(r"\g<1>0", c))
        elif isinstance(c, list) and not images:
            m = dict(m, content=[{"type": p["type"]} if p.get("type") == "image_url" else p for p in c])
        out.append(m)
    return out


class ConversationModel:
    """Serves saved conversations' replies in request order: the recorded content, reasoning,
    tool calls (their ids, and the dropped ones), finish reason and token counts, so the
    client classifies each reply as it did (cut, dropped calls) and the context evicts where
    it did; a failed request fails again (ContextOverflow as vLLM says it). Conversations are
    matched to the agent's sessions by game id (one conversation serves any session).

    Each request is compared with the recorded one (`comparable`); differences go to
    `mismatches` (request number and the first differing message), and with `strict` the
    request is refused with HTTP 409. `timeout_stall_s`: a reply the time limit cut is served
    with a stall of this length before its end, so that the replay's client cuts it too (set
    it above the replay's model.timeout_s; None serves it whole)."""

    def __init__(self, conversations: list[Conversation] | Conversation, *, strict: bool = False,
                 timeout_stall_s: float | None = None) -> None:
        convs = conversations if isinstance(conversations, list) else [conversations]
        self.convs = {c.game_id: c for c in convs}
        self.grids: dict[str, dict[int, Any] | None] = {c.game_id: _grids(c) for c in convs}
        self.strict, self.timeout_stall_s = strict, timeout_stall_s
        self.cursor: dict[str, int] = {}
        self.mismatches: list[dict[str, Any]] = []
        self.replies = [r for c in convs for r in c.replies]  # (for the command line's banner)
        self.lock = threading.Lock()

    @classmethod
    def from_files(cls, paths: list[str | Path], **kw: Any) -> "ConversationModel":
        from duck.play.conversation import read_conversation
        return cls([read_conversation(p) for p in paths], **kw)

    def _conversation(self, session: str) -> Conversation | None:
        if len(self.convs) == 1:
            return next(iter(self.convs.values()))
        game = session.rsplit(":", 1)[0]
        return self.convs.get(game) or next((c for g, c in self.convs.items() if g.split("-")[0] == game), None)

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        session = request.get("_session", "default")
        conv = self._conversation(session)
        if conv is None:
            return {"status": 404, "error": f"no conversation for session {session!r}"}
        n = self.cursor.get(session, 0)  # (one agent per session: its requests come one at a time)
        if n >= len(conv.requests):
            return {"status": 410, "error": f"the conversation's {len(conv.requests)} requests are used up"}
        grids = self.grids[conv.game_id]
        expected = comparable(conv.request_messages(n, grids), images=grids is not None)
        got = comparable(list(request.get("messages") or []), images=grids is not None)
        if got != expected:
            k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            with self.lock:
                self.mismatches.append({"session": session, "request": n, "message": k,
                                        "sent": len(got), "recorded": len(expected)})
            if self.strict:  # not served: a retry is compared with the same recorded request
                return {"status": 409, "error": f"request {n} differs from the recorded one at message {k}"}
        with self.lock:
            self.cursor[session] = n + 1
        if n in conv.errors:
            e = conv.errors[n]
            if e["error"] == "ContextOverflow":
                return {"status": 400, "error": "This model's maximum context length is exceeded (replayed: "
                                                f"{e['message'][:300]})"}
            return {"status": 422, "error": f"replayed failure: {e['message'][:300]}"}  # not retried
        r = conv.reply_of(n)
        if r is None:
            return {"status": 410, "error": f"request {n} has no recorded reply (the run ended during it)"}
        calls = [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in r["tool_calls"]]
        calls += [{"name": d.get("name") or "python", "arguments": d.get("arguments", "")} for d in r["dropped"]]
        out = {"content": r["content"], "reasoning": r["reasoning"], "tool_calls": calls,
               "finish_reason": r.get("finish_reason") or ("tool_calls" if calls else "stop"),
               "completion_tokens": r.get("completion_tokens"), "prompt_tokens": r.get("prompt_tokens"),
               "cached_tokens": r.get("cached_tokens")}
        if r.get("cut") == "timeout" and self.timeout_stall_s:
            out["stall_end_s"] = self.timeout_stall_s
        return out


def _grids(conv: Conversation) -> dict[int, Any] | None:
    """The boards of the record beside a conversation (to rebuild its images), or None."""
    from duck.play.conversation import record_of
    from duck.play.record import read_record
    path = record_of(conv.path) if conv.path else None
    if path is None or not path.exists():
        return None
    return dict(read_record(path).grids())
