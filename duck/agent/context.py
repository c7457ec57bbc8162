"""The message history sent to the model: prefix-stable, trimmed with hysteresis under a budget.

The server's prefix cache reuses the KV of any prompt prefix it has seen, so the cheapest
history only ever grows at its end. The rule: the system prompt and every past message are
never rewritten (past reasoning stays; only a cut reply's thinking is cut to its tail,
duck.llm.client.Reply.message). A turn is one user message and the assistant/tool messages
after it. The prompt's size is the server's (`usage`, then each new message's count:
duck.llm.tokens). When the prompt plus the output cap would pass the budget, or its images
`max_images` (asked by the loop before it builds a turn: `fit(images=N)`, and again before each
request), whole old turns right after the system prompt go in one block, down to `evict_to`:
never the current turn, never a history the template rejects, and no summary. One fact line
(prompts/trimmed.j2) and `carry` (the per-level memory) make one user message placed right
after the system prompt. The why of each rule: docs/agent.md, "The model's context"; what goes
into the messages: duck.agent.turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from duck.agent.turn import count_images, render
from duck.llm.tokens import TokenCounter, features
from duck.play.conversation import NULL, ConversationWriter

# Headroom while any count is an estimate: the server refuses a prompt that, with the output
# cap, passes its window. (The server's counts err the other way: a few template tokens over.)
ESTIMATE_MARGIN = 0.03


class ContextFull(Exception):
    """The current turn alone does not fit the budget, even with every older turn dropped.
    `fresh`: the turn holds only its opening message, so no turn can fit (the system prompt and
    one turn message outgrow the budget): the loop ends the model's play instead of retrying."""

    def __init__(self, message: str, *, tokens: int = 0, limit: int = 0, fresh: bool = False) -> None:
        super().__init__(message)
        self.tokens, self.limit, self.fresh = tokens, limit, fresh


@dataclass
class Count:
    """One message's tokens: the server's count (`exact`), else re-estimated on demand from its
    features with the estimator's latest rates."""
    x: np.ndarray
    tokens: int
    exact: bool


@dataclass
class Turn:
    index: int
    steps: int = 0  # the game's actions when the turn began (its message's "Step N")
    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # the messages' ids in the conversation file
    counts: list[Count] = field(default_factory=list)  # the messages' tokens


class Context:
    """System prompt + [carry] + turns; see the module docstring. Every message added, and
    every trim, goes to `log` (the game's conversation file, duck.play.conversation).
    `counter`: the server's per-message counts (duck.llm.client.ModelClient.counter: estimates
    where the server cannot count); None estimates only (calibrated by `observe`).
    `max_images`: images a prompt may hold (None: no limit)."""

    def __init__(self, system: str, budget: int, reserve: int, *, evict_to: float = 0.45,
                 carry: Callable[[], dict[str, Any] | None] | None = None, counter: TokenCounter | None = None,
                 log: ConversationWriter = NULL, max_images: int | None = None) -> None:
        self.max_images = max_images
        self.log = log
        self.counter = counter or TokenCounter(None)
        self.system = {"role": "system", "content": system}
        self.system_id = log.message(self.system, kind="system")
        self.system_count = self._count(self.system)
        self.budget = budget
        self.reserve = reserve  # the output cap: prompt + output must fit the budget
        self.evict_to = evict_to
        self.carry = carry
        self.head: list[tuple[dict[str, Any], int, Count]] = []  # the carried message: (message, id, count)
        self.turns: list[Turn] = []
        self.evictions = 0  # trims and dropped current turns (each changes the prompt's prefix)
        self.trims: list[dict[str, Any]] = []  # per trim: turns dropped, tokens before and after
        self.removed: list[Turn] = []  # the turns trimmed so far (their messages are dropped)
        self._version = 0  # bumped whenever anything but the end of the history changes
        self._anchor: tuple[int, int, int] | None = None  # (version, messages sent, prompt tokens)
        # Prompt tokens the per-message counts miss (the template's header, the generation prompt).
        self._offset = self.counter.overhead()

    # -- building -----------------------------------------------------------------------
    def begin_turn(self, user: dict[str, Any], *, index: int, **meta: Any) -> Turn:
        """A new turn, opened by a user message (what keeps every trimmed history valid);
        `meta` goes into the conversation file with it (level, actions_before)."""
        if user.get("role") != "user":
            raise ValueError(f"a turn opens with a user message, not {user.get('role')!r}")
        turn = Turn(index, int(meta.get("actions_before", 0)))
        self.turns.append(turn)
        self.add(user, **meta)
        return turn

    def add(self, message: dict[str, Any], **meta: Any) -> int:
        """Append to the current turn; returns the message's id in the conversation."""
        turn = self.turns[-1]
        turn.messages.append(message)
        turn.counts.append(self._count(message))
        turn.ids.append(self.log.message(message, turn=turn.index, **meta))
        return turn.ids[-1]

    @property
    def current(self) -> Turn:
        return self.turns[-1]

    def messages(self) -> list[dict[str, Any]]:
        out = [self.system] + [m for m, _, _ in self.head]
        for t in self.turns:
            out.extend(t.messages)
        return out

    def message_ids(self) -> list[int]:
        """The conversation ids of `messages()`, in the same order."""
        out = [self.system_id] + [i for _, i, _ in self.head]
        for t in self.turns:
            out.extend(t.ids)
        return out

    # -- tokens ---------------------------------------------------------------------------
    def _count(self, message: dict[str, Any]) -> Count:
        tokens, exact = self.counter.count(message)
        return Count(features(message), tokens, exact)

    def _tokens(self, c: Count) -> float:
        return c.tokens if c.exact else self.counter.estimator.tokens(c.x)

    def _all_counts(self) -> list[Count]:
        return [self.system_count] + [c for _, _, c in self.head] + [c for t in self.turns for c in t.counts]

    def turn_tokens(self, t: Turn) -> float:
        return sum(self._tokens(c) for c in t.counts)

    @property
    def exact(self) -> bool:
        """Whether every message's count is the server's."""
        return all(c.exact for c in self._all_counts())

    def observe(self, sent: int, prompt_tokens: int | None, completion_tokens: int | None = None) -> None:
        """The server counted `prompt_tokens` for the first `sent` messages (its `usage`). That
        anchors the next estimate, and the difference to the previous request's count, over the
        messages appended in between, calibrates the per-kind estimates."""
        if not prompt_tokens:
            return
        counts = self._all_counts()
        if self._anchor and self._anchor[0] == self._version and self._anchor[1] < sent <= len(counts):
            x = sum((c.x for c in counts[self._anchor[1]:sent]), np.zeros(5))
            self.counter.estimator.observe(x, prompt_tokens - self._anchor[2])
        self._offset = int(prompt_tokens - sum(self._tokens(c) for c in counts[:sent]))
        self._anchor = (self._version, sent, prompt_tokens)

    def estimate(self) -> int:
        """Tokens of the next prompt: the server's count of what was sent last, plus the
        messages appended since (without a count since the last change of prefix: the sum of
        the per-message counts and what they missed last time)."""
        counts = self._all_counts()
        if self._anchor and self._anchor[0] == self._version and self._anchor[1] <= len(counts):
            return int(self._anchor[2] + sum(self._tokens(c) for c in counts[self._anchor[1]:]))
        return int(sum(self._tokens(c) for c in counts) + self._offset)

    # -- budget ---------------------------------------------------------------------------
    def fit(self, images: int = 0) -> bool:
        """Make the next request fit the budget and `max_images`; True when old turns were
        dropped (a trim). Raises ContextFull when even the current turn alone is too long or
        holds too many images. `images` > 0: a turn with that many images is about to begin
        (it is not in the history yet): the old turns but the last are trimmed, if the images
        would pass `max_images`, as far as they can be, and nothing raises."""
        limit = self.budget - self.reserve - (0 if self.exact else int(ESTIMATE_MARGIN * self.budget))
        before = self.estimate()
        pics = [count_images(t.messages) for t in self.turns]
        cap = (1 << 30) if self.max_images is None else self.max_images
        if images:  # a turn about to begin: only its images' room counts here
            if sum(pics) + images <= cap or len(self.turns) < 2:
                return False
        elif before <= limit and sum(pics) <= cap:
            return False
        sizes = [self.turn_tokens(t) for t in self.turns]
        fixed = before - sum(sizes) - sum(self._tokens(c) for _, _, c in self.head)
        carried = self._carried()
        extra = self._tokens(self._count(self._head(carried, self.turns[:-1], self.turns[-1])))
        target, pic_target = self.evict_to * self.budget, int(self.evict_to * cap) - images
        drop = 1
        while drop < len(self.turns) - 1 and (fixed + extra + sum(sizes[drop:]) > target
                                              or sum(pics[drop:]) > pic_target):
            drop += 1
        carry = self._head(carried, self.turns[:drop], self.turns[min(drop, len(self.turns) - 1)])
        head = [self._count(carry)]
        extra = self._tokens(head[0])
        after = fixed + extra + sum(sizes[drop:])
        if not images and (len(self.turns) < 2 or after > limit or sum(pics[drop:]) > cap):
            alone = int(fixed + extra + sizes[-1]) if sizes else before
            why = (f"holds {pics[-1]} images (limit {cap}: model.serve.images_per_prompt)" if pics and pics[-1] > cap
                   else f"needs ~{alone} prompt tokens (limit {limit}: budget {self.budget} - output cap "
                        f"{self.reserve}{'' if self.exact else ' - 3%'})")
            raise ContextFull(f"the current turn alone {why}", tokens=alone, limit=limit,
                              fresh=bool(self.turns) and len(self.current.messages) == 1)
        dropped, self.turns = self.turns[:drop], self.turns[drop:]
        self.removed += dropped
        self._trimmed(dropped, (carry, self.log.message(carry, kind="carry"), head[0]), "evict", before)
        return True

    def drop_current(self) -> Turn:
        """Forget the current turn (it could not fit); the next turn starts after the older
        ones. The carried message stays as it is."""
        before = self.estimate()
        turn = self.turns.pop()
        self._trimmed([turn], self.head[0] if self.head else None, "drop_turn", before)
        return turn

    def _carried(self) -> str:
        """What `carry` says must survive a trim (the text of a user message), or ""."""
        m = self.carry() if self.carry is not None else None
        if m is None:
            return ""
        if m.get("role") != "user" or not isinstance(m.get("content"), str) or not m["content"]:
            self.log.event("carry_refused", why="the carried message must be a user message with text")
            return ""
        return m["content"]

    def _head(self, carried: str, dropping: list[Turn], first: Turn) -> dict[str, Any]:
        """The message right after the system prompt once `dropping` goes and `first` heads the
        history: the trim line (prompts/trimmed.j2), then the carried text."""
        gone = self.removed + dropping
        line = render("trimmed.j2", turns=len(gone), start=gone[0].steps if gone else first.steps, end=first.steps)
        return {"role": "user", "content": line + ("\n\n" + carried if carried else "")}

    def _trimmed(self, dropped: list[Turn], carry: tuple[dict[str, Any], int, Count] | None, kind: str,
                 before: int) -> None:
        """After turns were dropped: the new head (the carried message), the log line, the counts."""
        old = [i for _, i, _ in self.head]
        self.head = [carry] if carry else []
        self._version += 1
        self.evictions += 1
        after = self.estimate()
        if kind == "evict":
            self.trims.append({"turns": [t.index for t in dropped], "tokens_before": before, "tokens_after": after,
                               "dropped_tokens": int(sum(self.turn_tokens(t) for t in dropped))})
        self.log.event(kind, turns=[t.index for t in dropped], ids=[i for t in dropped for i in t.ids],
                       replaced=old, summary=None, carry=carry[1] if carry else None,  # (no summary any more)
                       estimate_before=before, estimate_after=after, budget=self.budget,
                       low_water=self.evict_to, exact=self.exact)
