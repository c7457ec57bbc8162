"""One chat completion as the client received it (`Reply`), and the assistant message it
becomes in the history (`Reply.message()`).

Reasoning arrives under the name the server uses: vLLM's reasoning parser gives `reasoning`
(older versions `reasoning_content`); hosted providers give `reasoning`, `reasoning_content`
(DeepSeek-style APIs) or `reasoning_details` (OpenRouter: a list of typed blocks, some signed
or encrypted, that must come back as they were). `Reply.reasoning` is its text whatever the
name; `Reply.reasoning_as` names the field(s) the message sends it back under (the client sets
them from `model.reasoning_field`: vLLM's two names by default, a hosted provider's own), and
`Reply.details` keeps the blocks to send back unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VLLM_NAMES = ("reasoning", "reasoning_content")  # what vLLM reads, and what its templates read
DETAIL_TEXT = ("text", "summary", "data")  # the string fields of a reasoning_details block, streamed in pieces


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the server produced


@dataclass
class Reply:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    latency_s: float = 0.0
    first_token_s: float | None = None
    url: str = ""
    attempts: int = 1
    seed: int | None = None
    cut: str | None = None  # "timeout" (our wall-clock limit) or "length" (the token cap); never "error":
    # a reply the server failed mid-stream is no reply (duck.llm.client raises ModelError, its cut "error")
    # Calls the client did not keep (arguments not a complete JSON object), and why:
    # "length" (cut at the output cap), "timeout" (cut at the time limit), "invalid"
    # (complete reply, unreadable arguments: code holding a tag of the tool-call format).
    dropped: list[dict[str, str]] = field(default_factory=list)
    # A cut reply keeps this many characters of its thinking's tail in the history (0: all).
    keep_thinking: int = 0
    # The provider's own figures: its `usage` object as received, and its cost where it reports one.
    usage: dict[str, Any] | None = None
    cost: float | None = None
    reasoning_as: tuple[str, ...] = VLLM_NAMES  # the message's reasoning field(s) (module docstring)
    details: list[dict[str, Any]] = field(default_factory=list)  # reasoning_details blocks as received
    token_ids: list[int] | None = None  # the sampled tokens (vLLM's return_token_ids), None where not sent

    def thinking(self) -> tuple[str, int]:
        """The reasoning the history keeps, and how many characters of it were dropped: all
        of it, unless the reply was cut and thought longer than `keep_thinking` characters;
        then its tail, from the first line (or word) start inside that tail."""
        r, keep = self.reasoning, self.keep_thinking
        if not self.cut or not keep or len(r) <= keep:
            return r, 0
        tail = r[-keep:]
        for sep in ("\n", " "):
            i = tail.find(sep)
            if 0 <= i < keep // 4:
                tail = tail[i + 1:]
                break
        return tail, len(r) - len(tail)

    @property
    def thinking_dropped(self) -> int:
        """Characters of thinking the history leaves out (0 unless the reply was cut)."""
        return self.thinking()[1]

    def message(self, marker: str = "…") -> dict[str, Any]:
        """The assistant message to append to the history, as generated, except that a cut
        reply keeps only the tail of its thinking, after `marker` (the agent passes a
        sentence saying so: prompts/thinking_cut.j2)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        reasoning, dropped = self.thinking()
        if dropped:
            reasoning = f"{marker}\n{reasoning}"
        for name in self.reasoning_as:
            if name == "reasoning_details" and self.details and not dropped:
                msg[name] = self.details  # signed or encrypted blocks go back untouched
            elif reasoning:  # (a cut reply's blocks no longer match its text: the text goes back)
                msg["reasoning" if name == "reasoning_details" else name] = reasoning
        calls = [c for c in self.tool_calls if json_object(c.arguments) or c.arguments == ""]  # (never one vLLM refuses)
        if calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
        return msg

    def stats(self) -> dict[str, Any]:
        """Per-call numbers for the record (`model` events) and the report."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "latency_s": round(self.latency_s, 3),
                "first_token_s": None if self.first_token_s is None else round(self.first_token_s, 3),
                "finish_reason": self.finish_reason, "cut": self.cut, "url": self.url,
                "attempts": self.attempts, "reasoning_chars": len(self.reasoning),
                "content_chars": len(self.content), "tool_calls": len(self.tool_calls),
                "dropped_calls": [d["why"] for d in self.dropped], "thinking_dropped": self.thinking_dropped,
                # Kept calls with nothing to run (`{}` or ""): what a streaming parser that
                # lost the arguments leaves (vllm#31501); duck doctor counts them as failures.
                "empty_calls": sum(1 for c in self.tool_calls if empty_call(c.arguments)),
                "usage": self.usage, "cost": self.cost}


def merge_details(blocks: list[dict[str, Any]], pieces: list[Any]) -> None:
    """Streamed `reasoning_details` pieces into whole blocks: a piece continues the block of its
    `index` (or the last one of its type), its string fields appended, the rest replaced."""
    for piece in pieces:
        if not isinstance(piece, dict):
            continue
        i = piece.get("index")
        same = next((b for b in blocks if i is not None and b.get("index") == i), None)
        if same is None:
            blocks.append(dict(piece))
            continue
        for k, v in piece.items():
            same[k] = same.get(k, "") + v if k in DETAIL_TEXT and isinstance(v, str) else v


def details_text(blocks: list[dict[str, Any]]) -> str:
    """The readable reasoning of `reasoning_details` blocks (text, else summary; encrypted: none)."""
    return "".join(str(b.get("text") or b.get("summary") or "") for b in blocks if isinstance(b, dict))


def json_object(text: str | None) -> bool:
    """True when `text` is a complete JSON object: the only tool-call arguments a server
    accepts back in the history (vLLM 0.19 answers 400 to anything else)."""
    try:
        return isinstance(json.loads(text or ""), dict)
    except (ValueError, RecursionError):  # (model text: '[' * 10**6 is a RecursionError, issue 37)
        return False


def empty_call(arguments: str | None) -> bool:
    """True when a call's arguments hold no code at all: "" or a JSON object without a
    non-blank string in it (`{}`, `{"code": ""}`)."""
    try:
        doc = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return False  # unreadable is not empty (the client drops it as `invalid`)
    return isinstance(doc, dict) and not any(isinstance(v, str) and v.strip() for v in doc.values())
