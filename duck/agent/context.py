"""The message history sent to the model, kept prefix-stable under a token budget.

The server's prefix cache reuses the KV of any prompt prefix it has seen, so the cheapest
history is one that only ever grows at its end. Here:

* the system prompt and every past message are never rewritten;
* a turn is one user message and the assistant/tool messages that follow it;
* before each request the prompt size is estimated from the server's own `usage` of the
  previous request (prompt + completion tokens) plus an estimate of what was appended
  since, calibrated by the ratio of reported to estimated tokens;
* when the estimate plus the output cap would pass the budget, a large block of the oldest
  turns is dropped at once (down to `evict_to` of the budget) and replaced by one compact
  summary message right after the system prompt. The prompt then changes once, and every
  later request hits the cache again (the Duck dropped one turn at a time right after the
  system prompt, so nearly every request missed).

What goes into the messages (the prompt files, the turn's board image, what a call's
actions did) is duck.agent.turn.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from duck.agent.turn import render
from duck.game.actions import display_name
from duck.play.conversation import NULL, ConversationWriter

CHARS_PER_TOKEN = 3.4  # a first guess; replaced by the server's counts as they come
IMAGE_TOKENS = 68  # a 256x256 image on Qwen3.6's vision encoder: 8x8 merged patches + marks
MESSAGE_OVERHEAD = 5  # <|im_start|>role\n ... <|im_end|>\n
SUMMARY_TOKENS = 700  # room kept for the summary of dropped turns (prompts/summary.j2)


def estimate_tokens(message: dict[str, Any]) -> float:
    """A character-based estimate of one message (before calibration)."""
    chars, images = 0, 0
    content = message.get("content")
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        for part in content:
            if part.get("type") == "text":
                chars += len(part.get("text", ""))
            else:
                images += 1
    chars += len(message.get("reasoning_content") or "")
    for call in message.get("tool_calls") or []:
        chars += len(call["function"]["arguments"]) + 40
    return chars / CHARS_PER_TOKEN + images * IMAGE_TOKENS + MESSAGE_OVERHEAD


class ContextFull(Exception):
    """The current turn alone no longer fits the budget: end it and start a fresh one."""


@dataclass
class Turn:
    index: int
    level: int
    actions_before: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    estimates: list[float] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # the messages' ids in the conversation file
    actions: list[str] = field(default_factory=list)  # display strings the turn executed
    outcome: str = ""  # what the actions did, in a few words
    notes: str = ""  # the notes as they stood at the end of the turn

    @property
    def estimate(self) -> float:
        return sum(self.estimates)


class Context:
    """System prompt + [summary] + turns; see the module docstring. Every message added, and
    every eviction, goes to `log` (the game's conversation file, duck.play.conversation)."""

    def __init__(self, system: str, budget: int, reserve: int, *, evict_to: float = 0.5,
                 summarise: Callable[[list[Turn], list[dict[str, Any]]], str] | None = None,
                 log: ConversationWriter = NULL) -> None:
        self.log = log
        self.system = {"role": "system", "content": system}
        self.system_id = log.message(self.system, kind="system")
        self.summary_id: int | None = None
        self.budget = budget
        self.reserve = reserve  # the output cap: prompt + output must fit the budget
        self.evict_to = evict_to
        self.summarise = summarise or summary_text
        self.summary: dict[str, Any] | None = None
        self.summary_items: list[dict[str, Any]] = []  # what all dropped turns established
        self.turns: list[Turn] = []
        self.ratio = 1.0  # reported / estimated tokens, from the server's usage
        self.evictions = 0
        self._known: tuple[int, int] | None = None  # (messages counted, tokens) from usage
        self._calibrated = False

    # -- building -----------------------------------------------------------------------
    def begin_turn(self, user: dict[str, Any], *, index: int, level: int, actions_before: int) -> Turn:
        turn = Turn(index, level, actions_before)
        self.turns.append(turn)
        self.add(user, level=level, actions_before=actions_before)
        return turn

    def add(self, message: dict[str, Any], **meta: Any) -> int:
        """Append to the current turn; returns the message's id in the conversation."""
        turn = self.turns[-1]
        turn.messages.append(message)
        turn.estimates.append(estimate_tokens(message))
        turn.ids.append(self.log.message(message, turn=turn.index, **meta))
        return turn.ids[-1]

    def add_all(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            self.add(m)

    @property
    def current(self) -> Turn:
        return self.turns[-1]

    def messages(self) -> list[dict[str, Any]]:
        out = [self.system]
        if self.summary:
            out.append(self.summary)
        for t in self.turns:
            out.extend(t.messages)
        return out

    def message_ids(self) -> list[int]:
        """The conversation ids of `messages()`, in the same order."""
        out = [self.system_id] + ([self.summary_id] if self.summary and self.summary_id is not None else [])
        for t in self.turns:
            out.extend(t.ids)
        return out

    # -- budget ---------------------------------------------------------------------------
    def observe(self, sent: int, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """The server counted `prompt_tokens` for the first `sent` messages; the reply that
        follows them (already appended) took `completion_tokens`."""
        if not prompt_tokens:
            return
        raw = self._raw(sent)
        if raw > 0:
            r = prompt_tokens / raw
            self.ratio = 0.7 * self.ratio + 0.3 * r if self._calibrated else r
            self._calibrated = True
        self._known = (sent + 1, prompt_tokens + (completion_tokens or 0))

    def _raw(self, upto: int | None = None) -> float:
        ests = [estimate_tokens(self.system)] + ([estimate_tokens(self.summary)] if self.summary else [])
        for t in self.turns:
            ests.extend(t.estimates)
        return sum(ests if upto is None else ests[:upto])

    def estimate(self) -> int:
        """Tokens of the next prompt: the server's count so far, plus estimates beyond it."""
        n = len(self.messages())
        if self._known and self._known[0] <= n:
            upto, tokens = self._known
            return int(tokens + self.ratio * (self._raw() - self._raw(upto)))
        return int(self.ratio * self._raw())

    def fit(self) -> bool:
        """Make the next request fit; True when turns were dropped. Raises ContextFull when
        even the current turn alone is too long."""
        limit = self.budget - self.reserve
        if self.estimate() <= limit:
            return False
        target = self.evict_to * self.budget - SUMMARY_TOKENS  # room for the summary itself
        drop = 0
        while drop < len(self.turns) - 1:
            drop += 1
            rest = self.ratio * (self._raw() - sum(t.estimate for t in self.turns[:drop]))
            if rest <= target:
                break
        if drop == 0 or self.ratio * (self._raw() - sum(t.estimate for t in self.turns[:drop])) > limit:
            raise ContextFull(f"the current turn alone is ~{self.estimate()} tokens (limit {limit})")
        before = self.estimate()
        dropped, self.turns = self.turns[:drop], self.turns[drop:]
        self.summary_items.extend(turn_item(t) for t in dropped)
        self._summarise(dropped, "evict", before)
        return True

    def drop_current(self) -> Turn:
        """Forget the current turn (it could not fit); it goes into the summary."""
        before = self.estimate()
        turn = self.turns.pop()
        self.summary_items.append(turn_item(turn))
        self._summarise([turn], "drop_turn", before)
        return turn

    def _summarise(self, dropped: list[Turn], kind: str, before: int) -> None:
        old = self.summary_id
        self.summary = {"role": "user", "content": self.summarise(dropped, self.summary_items)}
        self.summary_id = self.log.message(self.summary, kind="summary")
        self._known = None
        self.evictions += 1
        self.log.event(kind, turns=[t.index for t in dropped], ids=[i for t in dropped for i in t.ids],
                       replaced_summary=old, summary=self.summary_id, estimate_before=before,
                       estimate_after=self.estimate(), budget=self.budget)


def turn_item(t: Turn) -> dict[str, Any]:
    """One dropped turn, reduced to what the summary shows."""
    return {"turn": t.index, "level": t.level, "actions_before": t.actions_before,
            "actions": list(t.actions), "outcome": t.outcome, "notes": t.notes}


def compress_actions(actions: list[str]) -> str:
    """['UP', 'UP', 'LEFT'] → 'UP x2, LEFT'."""
    out: list[str] = []
    for a in actions:
        if out and out[-1].rsplit(" x", 1)[0] == a:
            base, _, n = out[-1].partition(" x")
            out[-1] = f"{a} x{int(n or 1) + 1}"
        else:
            out.append(a)
    return ", ".join(out)


def level_digest(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: turns, actions, and how often each action was used."""
    levels: dict[int, dict[str, Any]] = {}
    for it in items:
        d = levels.setdefault(it["level"], {"level": it["level"], "turns": 0, "actions": 0,
                                            "counts": Counter(), "outcomes": Counter()})
        d["turns"] += 1
        d["actions"] += len(it["actions"])
        d["counts"].update(display_name(a) for a in it["actions"])
        if it["outcome"]:
            d["outcomes"][it["outcome"]] += 1
    return [levels[k] for k in sorted(levels)]


def summary_text(dropped: list[Turn], items: list[dict[str, Any]], recent: int = 24) -> str:
    """The compact summary that replaces dropped turns (prompts/summary.j2)."""
    tail = [dict(it, actions_text=compress_actions(it["actions"])) for it in items[-recent:]]
    return render("summary.j2", first_turn=items[0]["turn"], last_turn=items[-1]["turn"],
                  levels=level_digest(items), recent=tail, notes=items[-1]["notes"])
