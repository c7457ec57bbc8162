"""The conversation view of `duck report`: a game's conversation file
(duck.play.conversation) as turns a person can read, and where the actions went per level.

A turn is its user message (the board as an image, the text folded) and what followed:
replies, tool results, corrections, failed requests, evictions and the notes where they
changed; HTML without script (`<details>` folds), long texts cut at `max_chars`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duck.game.actions import display_name
from duck.game.frames import grid_png
from duck.lab.report.blocks import esc, md_table, table
from duck.lab.report.highlight import highlight_python
from duck.lab.report.plots import png_data_uri
from duck.play.conversation import Conversation, apply_notes

CSS = """
.conv details.turn{border:1px solid #ddd;margin:.3em 0;padding:.2em .5em}
.conv details.turn>summary{cursor:pointer;font-size:.9em}
.conv .board{float:right;width:192px;height:192px;image-rendering:pixelated;margin:0 0 .4em .8em;border:1px solid #ccc}
.conv .who{font-weight:bold;font-size:.8em;color:#555;margin-top:.5em}
.conv .text{white-space:pre-wrap;font-size:.85em;margin:.2em 0}
.conv pre.code{background:#272822;color:#f8f8f2}
.conv pre.code .k{color:#f92672}.conv pre.code .b{color:#66d9ef}.conv pre.code .s{color:#e6db74}
.conv pre.code .n{color:#ae81ff}.conv pre.code .c{color:#75715e}
.conv pre.out{background:#f2f7ff}
.conv .event{font-size:.8em;color:#805000;margin:.3em 0}
.conv .notes pre{background:#f5fff2}
.conv .turnbody::after{content:"";display:block;clear:both}
"""


@dataclass
class ConvTurn:
    index: int
    level: int | None = None
    actions_before: int | None = None
    step: int | None = None  # the board's step (record's action index), from the image reference
    image: str | None = None  # an inline image's data URI (when it was not a board reference)
    text: str = ""
    items: list[tuple[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    outcome: str = ""
    calls: int = 0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or []
                   if isinstance(p, dict) and p.get("type") == "text")


def turns(conv: Conversation) -> tuple[list[ConvTurn], list[tuple[str, Any]]]:
    """The conversation's turns, and the items before its first turn (the system prompt)."""
    out: list[ConvTurn] = []
    head: list[tuple[str, Any]] = []
    notes: dict[str, Any] = {}

    def where() -> list[tuple[str, Any]]:
        return out[-1].items if out else head

    for line in conv.lines:
        kind = line.get("type")
        if kind == "message":
            msg, role = line["message"], line["message"].get("role")
            if line.get("kind") == "system":
                where().append(("system", msg.get("content", "")))
            elif line.get("kind") in ("summary", "carry"):
                where().append((line["kind"], _text(msg.get("content"))))
            elif role == "user" and "level" in line:
                t = ConvTurn(line.get("turn", len(out)), line.get("level"), line.get("actions_before"))
                t.text = _text(msg.get("content"))
                for p in msg.get("content") if isinstance(msg.get("content"), list) else []:
                    board = (p.get("image_url") or {}).get("board") if isinstance(p, dict) else None
                    if board:
                        t.step = board["step"]
                    elif isinstance(p, dict) and p.get("type") == "image_url":
                        t.image = p["image_url"].get("url")
                out.append(t)
            elif role == "assistant":
                where().append(("reply", {"message": msg, "reply": None}))
            elif role == "tool":
                where().append(("tool", {"content": _text(msg.get("content")), "result": line.get("result"),
                                         "correction": line.get("correction")}))
            else:
                where().append(("user", _text(msg.get("content"))))
        elif kind == "reply":
            for item in reversed(where()):
                if item[0] == "reply":
                    item[1]["reply"] = line
                    break
            if out:
                out[-1].calls += 1
        elif kind == "error":
            where().append(("error", line))
            if out:
                out[-1].calls += 1
        elif kind == "event" and line.get("kind") == "turn_end":
            for t in reversed(out):
                if t.index == line.get("turn"):
                    t.actions, t.outcome = list(line.get("actions") or []), line.get("outcome", "")
                    break
        elif kind == "event" and line.get("kind") != "start":
            items = where()
            if line.get("kind") in ("evict", "drop_turn") and items and items[-1][0] == "summary":
                items.insert(len(items) - 1, ("event", line))  # the eviction, then its summary
            else:
                items.append(("event", line))
        elif kind == "notes":
            notes = apply_notes(notes, line)
            changed = {**line.get("sections", {}).get("set", {}), **line.get("extra", {}).get("set", {})}
            where().append(("notes", {"changed": changed, "notes": notes}))
    return out, head


def level_rows(conv: Conversation, turn_list: list[ConvTurn]) -> tuple[list[str], list[list[Any]]]:
    """Per level: turns, model calls, actions by name, outcomes, corrections, tokens, model time."""
    levels: dict[int, dict[str, Any]] = {}
    for t in turn_list:
        d = levels.setdefault(t.level or 0, {"turns": 0, "calls": 0, "actions": Counter(), "n": 0,
                                             "outcomes": Counter(), "corrections": 0, "prompt": 0,
                                             "completion": 0, "seconds": 0.0, "errors": 0})
        d["turns"] += 1
        d["calls"] += t.calls
        d["n"] += len(t.actions)
        d["actions"].update(display_name(a) for a in t.actions)
        d["outcomes"][t.outcome or "no action"] += 1
        for kind, item in t.items:
            if kind == "tool" and item.get("correction") or kind == "user":
                d["corrections"] += 1
            elif kind == "error":
                d["errors"] += 1
            elif kind == "reply" and item["reply"]:
                r = item["reply"]
                d["prompt"] += r.get("prompt_tokens") or 0
                d["completion"] += r.get("completion_tokens") or 0
                d["seconds"] += r.get("latency_s") or 0.0
    head = ["level", "turns", "model calls", "actions", "actions by name", "turn outcomes", "corrections",
            "failed calls", "prompt tokens", "completion tokens", "model s"]
    rows = [[lv, d["turns"], d["calls"], d["n"],
             ", ".join(f"{k} ×{v}" for k, v in d["actions"].most_common()),
             ", ".join(f"{k} ×{v}" for k, v in d["outcomes"].most_common()), d["corrections"], d["errors"],
             f"{d['prompt']:,}", f"{d['completion']:,}", f"{d['seconds']:.1f}"]
            for lv, d in sorted(levels.items())]
    return head, rows


def cut(text: str, max_chars: int) -> str:
    if not max_chars or len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n… ({len(text) - max_chars:,} more characters in the conversation file)"


def conversation_html(conv: Conversation, grids: dict[int, np.ndarray] | None, *, anchor: str,
                      max_chars: int = 6000, open_turns: int = 2) -> str:
    """The conversation section of one game (see the module docstring)."""
    turn_list, head = turns(conv)
    n_req, n_err = len(conv.requests), len(conv.errors)
    tokens = sum((r.get("prompt_tokens") or 0) + (r.get("completion_tokens") or 0)
                 for r in conv.replies.values())
    evictions = sum(1 for ln in conv.lines
                    if ln.get("type") == "event" and ln.get("kind") in ("evict", "drop_turn"))
    state = "torn last line (killed run)" if conv.torn else "no end line (unfinished)" if conv.end is None else \
        f"ended: {conv.end.get('reason')}"
    h = [f"<div class=conv id=\"{esc(anchor)}\" data-requests={n_req}>",
         f"<h3>Conversation</h3><p class=muted>{esc(conv.path.name if conv.path else '')} · "
         f"{len(turn_list)} turns · {n_req} model requests ({n_err} failed) · {tokens:,} tokens · "
         f"{evictions} evictions · {esc(state)} · model {esc(conv.start.get('model'))}</p>"]
    lh, lrows = level_rows(conv, turn_list)
    if lrows:
        h.append("<h4>Where the actions went, per level</h4>" + table(lh, lrows))
    for kind, item in head:
        h.append(_item_html(kind, item, max_chars))
    for k, t in enumerate(turn_list):
        acts = ", ".join(t.actions[:8]) + (f" … ({len(t.actions)})" if len(t.actions) > 8 else "")
        summary = (f"turn {t.index} · level {t.level} · after action {t.actions_before} · {t.calls} calls · "
                   f"{esc(acts) or 'no action'}{' · ' + esc(t.outcome) if t.outcome else ''}")
        h.append(f"<details class=turn data-turn={t.index}{' open' if k < open_turns else ''}>"
                 f"<summary>{summary}</summary><div class=turnbody>")
        src = t.image or (png_data_uri(grid_png(grids[t.step], 3)) if grids and t.step in grids else None)
        if src:
            h.append(f"<img class=board alt=\"board at action {t.step}\" title=\"the board the model saw "
                     f"(after action {t.step})\" src=\"{src}\">")
        h.append(f"<details><summary class=who>user message ({len(t.text):,} chars)</summary>"
                 f"<div class=text>{esc(cut(t.text, max_chars))}</div></details>")
        h.extend(_item_html(kind, item, max_chars) for kind, item in t.items)
        h.append("</div></details>")
    h.append("</div>")
    return "\n".join(h)


def _item_html(kind: str, item: Any, max_chars: int) -> str:
    if kind == "system":
        return (f"<details><summary class=who>system prompt ({len(item):,} chars)</summary>"
                f"<div class=text>{esc(cut(item, max_chars))}</div></details>")
    if kind in ("summary", "carry"):
        what = "the summary that replaced dropped turns" if kind == "summary" else "the message carried past the trim"
        return (f"<details class=event><summary>{what} ({len(item):,} chars)"
                f"</summary><div class=text>{esc(cut(item, max_chars))}</div></details>")
    if kind == "reply":
        msg, r = item["message"], item["reply"] or {}
        stats = " · ".join(x for x in (
            f"{r.get('completion_tokens')} tokens out" if r.get("completion_tokens") is not None else "",
            f"{r.get('prompt_tokens'):,} in" if r.get("prompt_tokens") is not None else "",
            f"{r.get('latency_s')} s" if r.get("latency_s") is not None else "",
            f"finish {r.get('finish_reason')}" if r.get("finish_reason") else "",
            f"cut: {r.get('cut')}" if r.get("cut") else "") if x)
        out = [f"<div class=who>model <span class=muted>{esc(stats)}</span></div>"]
        if msg.get("reasoning"):
            out.append(f"<details><summary class=muted>reasoning ({len(msg['reasoning']):,} chars)</summary>"
                       f"<div class=text>{esc(cut(msg['reasoning'], max_chars))}</div></details>")
        if msg.get("content"):
            out.append(f"<div class=text>{esc(cut(msg['content'], max_chars))}</div>")
        for c in msg.get("tool_calls") or []:
            out.append(f"<pre class=code>{_code_html(c['function']['arguments'], max_chars)}</pre>")
        for d in r.get("dropped") or []:
            out.append(f"<div class=event>a tool call the client dropped ({esc(d.get('why'))}):</div>"
                       f"<pre class=code>{esc(cut(d.get('arguments', ''), max_chars))}</pre>")
        return "\n".join(out)
    if kind == "tool":
        res = item.get("result") or {}
        label = "correction" if item.get("correction") else f"output ({res.get('kind', 'ok')}" + (
            f", {len(res.get('actions') or [])} actions)" if res.get("actions") else ")")
        return f"<div class=who>{esc(label)}</div><pre class=out>{esc(cut(readable(item['content']), max_chars))}</pre>"
    if kind == "user":
        return f"<div class=who>correction</div><div class=text>{esc(cut(item, max_chars))}</div>"
    if kind == "error":
        return f"<div class=event>request {item.get('n')} failed: {esc(item.get('error'))}: {esc(item.get('message'))}</div>"
    if kind == "notes":
        what = ", ".join(item["changed"]) or f"level {item['notes'].get('level')}, marks to recheck"
        body = "\n".join(f"{k}: {v}" for k, v in item["changed"].items()) or json.dumps(
            {k: item["notes"].get(k) for k in ("level", "carried_from")})
        return (f"<details class=notes><summary class=muted>notes changed: {esc(what)}</summary>"
                f"<pre>{esc(cut(body, max_chars))}</pre></details>")
    if kind == "event" and item.get("kind") in ("evict", "drop_turn"):
        turns_ = item.get("turns") or []
        span = f"{turns_[0]}–{turns_[-1]}" if len(turns_) > 1 else str(turns_[0]) if turns_ else "?"
        what = "the prompt neared its budget" if item["kind"] == "evict" else "this turn alone outgrew the budget"
        return (f"<div class=event>{esc(what)}: turns {span} dropped "
                f"({len(item.get('ids') or [])} messages), prompt ~{item.get('estimate_before', 0):,} → "
                f"~{item.get('estimate_after', 0):,} tokens of "
                f"{item.get('budget', 0):,}" + ("; a summary replaces them:"
                                                if item.get("summary") is not None
                                                 else "") + "</div>")
    if kind == "event":
        data = {k: v for k, v in item.items() if k not in ("type", "kind", "t")}
        return f"<div class=event>{esc(item.get('kind'))}: {esc(json.dumps(data, default=str)[:400])}</div>"
    return ""


def readable(tool_text: str) -> str:
    """A tool result for reading: the model saw a JSON object whose `stdout` is one string
    with escaped line breaks; shown here as the other keys on one line, then the output."""
    try:
        doc = json.loads(tool_text)
    except ValueError:
        return tool_text
    if not (isinstance(doc, dict) and isinstance(doc.get("stdout"), str)):
        return tool_text
    rest = {k: v for k, v in doc.items() if k not in ("stdout", "tool")}
    return json.dumps(rest, default=str) + "\n" + doc["stdout"]


def code_of(arguments: str) -> str | None:
    """The code of a tool call's arguments (`{"code": ...}`), None when they hold none."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return None
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else None


def _code_html(arguments: str, max_chars: int) -> str:
    """A tool call's code highlighted; arguments that are not {"code": ...} shown as they are."""
    code = code_of(arguments)
    return esc(cut(arguments, max_chars)) if code is None else highlight_python(cut(code, max_chars))


def conversation_markdown(conv: Conversation) -> list[str]:
    """The conversation's numbers for report.md: a line and the per-level table."""
    turn_list, _ = turns(conv)
    out = [f"Conversation: {len(turn_list)} turns, {len(conv.requests)} model requests "
           f"({len(conv.errors)} failed), file `{conv.path.name if conv.path else ''}`.", ""]
    head, rows = level_rows(conv, turn_list)
    if rows:
        out += [md_table(head, rows), ""]
    return out
