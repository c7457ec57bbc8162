"""One played game's samples: requests grouped into segments (or single requests), rendered
by the served chat template, with one loss span per reply that was received whole.

A segment is a run of requests each of whose rendering with the generation prompt is a prefix
of the next one's (and whose messages are the next one's first messages, its reply right
after); a trim (`evict`), a `drop_turn` or a broken prefix starts a new one. A span starts
where its request's own rendering ends (computed, never searched for) and ends after that
turn's `<|im_end|>`. `--max-tokens` cuts a segment into windows that start at a turn's user
message after the system prompt. The format: docs/training.md.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any, Callable

from duck.llm.render import ChatTemplate, HistoryError
from duck.play.conversation import DATA_PNG, unranges
from duck.play.record import unpack_ids
from duck.train.source import Game

END = "<|im_end|>"
THINK_END = "\n</think>\n\n"
WHOLE = ("stop", "tool_calls")
TRIMS = ("evict", "drop_turn")


@dataclass
class Request:
    n: int
    ids: list[int]  # the message ids it sent
    turn: int | None
    pos: int  # its line's index in the file
    reply: dict[str, Any] | None
    off: str | None = None  # why its reply carries no loss (None: it does)
    prompt: str = ""  # its rendering with the generation prompt


@dataclass
class Options:
    """What the export asks of every sample (the command's flags)."""

    unit: str = "segment"
    keep: str = "all"
    reasoning_loss: bool = True
    max_tokens: int | None = None
    drop_mismatched: bool = False


def reply_off(reply: dict[str, Any] | None) -> str | None:
    """Why a reply is context only: none, cut, part of its thinking dropped, tool calls dropped."""
    if reply is None or reply.get("message") is None:
        return "no reply"
    if reply.get("cut") or reply.get("finish_reason") not in WHOLE:
        return "cut"
    if reply.get("thinking_dropped"):
        return "thinking dropped"
    if reply.get("dropped"):
        return "tool calls dropped"
    return None


class GameSamples:
    """Builds one game's samples; `store(png) -> path` keeps an image and names it."""

    def __init__(self, game: Game, template: ChatTemplate, opts: Options, store: Callable[[bytes], str],
                 tokenizer: Any = None) -> None:
        self.game, self.template, self.opts, self.store, self.tok = game, template, opts, store, tokenizer
        self._msgs: dict[int, dict[str, Any]] = {}
        self.counts: dict[str, int] = {}

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    # -- messages and rendering -----------------------------------------------------------
    def message(self, i: int) -> dict[str, Any]:
        """Message `i` as it was sent, each image a file of the data set."""
        if i not in self._msgs:
            msg = self.game.conv.message(i, self.game.grids)
            if isinstance(msg.get("content"), list):
                msg["content"] = [self._image(p) for p in msg["content"]]
            self._msgs[i] = msg
        return self._msgs[i]

    def _image(self, part: Any) -> Any:
        spec = part.get("image_url") if isinstance(part, dict) else None
        if not isinstance(spec, dict):
            return part
        url = spec.get("url")
        if not (isinstance(url, str) and url.startswith(DATA_PNG)):
            raise HistoryError("an image the export cannot rebuild (no record beside the conversation?)")
        path = self.store(base64.b64decode(url[len(DATA_PNG):]))
        return dict(part, image_url={**{k: v for k, v in spec.items() if k != "url"}, "url": path})

    def render(self, ids: list[int], extra: list[dict[str, Any]] = (), generation: bool = True) -> str:
        messages = [self.message(i) for i in ids] + list(extra)
        return self.template.render_with(messages, self.game.tools, self.game.variables, generation)

    # -- requests and units ---------------------------------------------------------------
    def requests(self) -> list[Request]:
        conv = self.game.conv
        out = []
        for pos, line in enumerate(conv.lines):
            if line.get("type") == "request":
                reply = conv.replies.get(line["n"])
                out.append(Request(line["n"], unranges(line["ids"]), line.get("turn"), pos, reply,
                                   reply_off(reply)))
        return out

    def units(self) -> list[list[Request]]:
        """The requests grouped into segments (or one per request), those without a reply at
        the end of a group left out, groups without a reply dropped."""
        reqs = self.requests()
        trims = [k for k, line in enumerate(self.game.conv.lines)
                 if line.get("type") == "event" and line.get("kind") in TRIMS]
        groups: list[list[Request]] = []
        for r in reqs:
            try:
                r.prompt = self.render(r.ids)
            except HistoryError as e:
                self.count(f"request not rendered ({str(e)[:60]})")
                continue
            prev = groups[-1][-1] if groups else None
            if prev is None or self.opts.unit == "request" or not self._continues(prev, r, trims):
                groups.append([])
            groups[-1].append(r)
        return [g for g in map(_replied, groups) if g]

    def _continues(self, prev: Request, r: Request, trims: list[int]) -> bool:
        if any(prev.pos < k < r.pos for k in trims):
            return False
        n = len(prev.ids)
        if r.ids[:n] != prev.ids:
            return False
        if prev.reply is not None and prev.reply.get("message") is not None:
            if len(r.ids) <= n or r.ids[n] != prev.reply["message"]:
                return False
        return r.prompt.startswith(prev.prompt)

    def windows(self, group: list[Request]) -> list[tuple[list[Request], int]]:
        """`group` as windows of at most `max_tokens` tokens, each (requests, cut): the system
        message and the messages from a turn's user message on. A turn alone longer is skipped."""
        limit = self.opts.max_tokens
        if not limit or self._tokens(group, 0) <= limit:
            return [(group, 0)]
        ids = group[-1].ids
        starts: dict[Any, int] = {}
        for k, i in enumerate(ids[1:], 1):
            line = self.game.conv.messages[i]
            if "turn" in line and "call" not in line and line["message"].get("role") == "user":
                starts.setdefault(line["turn"], k)
        turns: list[list[Request]] = []
        for r in group:
            if turns and (turns[-1][-1].turn == r.turn or r.turn not in starts):
                turns[-1].append(r)
            else:
                turns.append([r])
        out, cur = [], []
        for reqs in turns:
            if reqs[0].turn not in starts:
                self.count("requests before the segment's first turn start (not in a window)", len(reqs))
                continue
            if cur and self._tokens(cur + reqs, starts[cur[0].turn]) <= limit:
                cur = cur + reqs
                continue
            if cur:
                out.append(cur)
            cur = reqs if self._tokens(reqs, starts[reqs[0].turn]) <= limit else []
            if not cur:
                self.count("turn longer than --max-tokens")
        out.append(cur)
        return [(w, starts[w[0].turn]) for w in (_replied(w) for w in out) if w]

    def _tokens(self, group: list[Request], cut: int) -> int:
        group = _replied(group)
        if not group:
            return 0
        last = group[-1]
        ids = last.ids[:1] + last.ids[cut:] if cut else last.ids
        return len(self.tok.encode(self.render(ids, [self.message(last.reply["message"])], False)))

    # -- one sample -----------------------------------------------------------------------
    def sample(self, group: list[Request], cut: int = 0, sid: str = "") -> dict[str, Any] | None:
        """The sample of `group` (its last request's messages and reply); `cut` > 0: only the
        system message and the messages from index `cut` on (a window). None: not a sample."""
        last = group[-1]
        keep = (lambda ids: ids[:1] + ids[cut:]) if cut else (lambda ids: ids)
        ids = keep(last.ids)
        messages = [self.message(i) for i in ids] + [self.message(last.reply["message"])]
        try:
            text = self.template.render_with(messages, self.game.tools, self.game.variables, False)
        except HistoryError as e:
            self.count(f"sample not rendered ({str(e)[:60]})")
            return None
        spans: list[list[int]] = []
        turns = []
        for r in group:
            prompt = self.render(keep(r.ids)) if cut else r.prompt
            if not text.startswith(prompt):
                self.count("a request's rendering is not a prefix of the sample")
                return None
            turn, span = self._turn(r, text, len(prompt), len(keep(r.ids)))
            if span is not None:
                turn["span"] = len(spans)
                spans.append(span)
            turns.append(turn)
        return {"id": sid, "messages": messages, "text": text, "loss": spans, "turns": turns}

    def _turn(self, r: Request, text: str, start: int, sent: int) -> tuple[dict[str, Any], list[int] | None]:
        """A request's entry in `turns`, and its loss span (None: off, and why)."""
        turn: dict[str, Any] = {"n": r.n, "sent": sent, "span": None}
        if r.reply is None or r.reply.get("message") is None:
            return turn, None
        turn["at"] = start  # where its reply begins: its own rendering's end
        end = text.find(END, start)
        if end < 0:
            r.off = r.off or "no end of turn"
            turn["off"] = r.off
            return turn, None
        end += len(END)
        packed = r.reply.get("token_ids")
        if packed:
            turn["sampled"] = packed
            if self.tok is not None and self.tok.decode(unpack_ids(packed)) != text[start:end]:
                turn["mismatch"] = True
                self.count("sampled text differs from the re-rendered reply")
                if self.opts.drop_mismatched and r.off is None:
                    r.off = "mismatch"
        if r.off is None and self.opts.keep == "levels" and \
                self.game.turn_level.get(r.turn) not in self.game.completed:
            r.off = "level not completed"
        if r.off is not None:
            turn["off"] = r.off
            return turn, None
        if not self.opts.reasoning_loss:
            start = self._past_reasoning(r, text, start)
        return turn, [start, end]

    def _past_reasoning(self, r: Request, text: str, start: int) -> int:
        """Where the reply's text after its thinking starts: the reasoning as the template writes
        it (trimmed) and `\\n</think>\\n\\n`, counted (thinking off: the prompt already closed it)."""
        if text[:start].endswith(THINK_END):
            return start
        msg = self.message(r.reply["message"])
        at = start + len(reasoning_of(msg).strip()) + len(THINK_END)
        if text[start:at].endswith(THINK_END):
            return at
        raise HistoryError(f"request {r.n}: its thinking does not end where it is counted to")


def _replied(group: list[Request]) -> list[Request]:
    """`group` without the requests after its last reply."""
    while group and group[-1].off == "no reply":
        group = group[:-1]
    return group


def span_key(text: str, span: list[int]) -> str:
    """What makes two spans duplicates: the same prompt prefix and reply."""
    return hashlib.sha256(text[:span[1]].encode("utf-8", "surrogatepass")).hexdigest()


def reasoning_of(m: dict[str, Any]) -> str:
    """A message's reasoning, in whichever field the server sent it."""
    return next((m[k] for k in ("reasoning", "reasoning_content") if isinstance(m.get(k), str)), "")
