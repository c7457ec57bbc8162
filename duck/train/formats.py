"""The canonical sample in the trainers' formats, and back (what export-check compares).

* `ms_swift(sample)`: ms-swift's `messages`/`tools`/`images` with `loss` per assistant message.
  Its tool-call conversion drops `reasoning_content`, so a reply's thinking goes into its
  content as `<think>\\n...\\n</think>\\n\\n`, where the Qwen template writes it; each tool call is
  a `tool_call` message, each result a `tool_response`, each image an `<image>` tag.
* `tokens(sample, tok)`: `input_ids` and `labels` (-100 off the loss), encoded piecewise at
  every reply's borders (a reply's tokens are its sampled ones where they spell its text), one
  `<|image_pad|>` per image (a vision collator expands it, labels -100).
"""

from __future__ import annotations

import json
from typing import Any

from duck.play.record import unpack_ids
from duck.train.samples import END, reasoning_of

IMAGE = "<image>"


def _parts(content: Any) -> tuple[str, list[str]]:
    """A message's content as text with `<image>` tags, and its images in order."""
    if not isinstance(content, list):
        return ("" if content is None else str(content)), []
    text, images = [], []
    for p in content:
        if isinstance(p, dict) and p.get("type") in ("image_url", "image"):
            text.append(IMAGE)
            images.append(((p.get("image_url") or {}).get("url")) or "")
        elif isinstance(p, dict) and p.get("type") == "text":
            text.append(p.get("text", ""))
    return "".join(text), images


def _last_query(messages: list[dict[str, Any]]) -> int:
    return max((k for k, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def ms_swift(sample: dict[str, Any]) -> dict[str, Any]:
    """One sample as ms-swift reads it (see the module docstring)."""
    messages = sample["messages"]
    loss = {t["sent"] for t in sample["turns"] if t.get("span") is not None}
    preserve = sample["template_kwargs"].get("preserve_thinking", True) is not False
    query = _last_query(messages)
    out, images = [], []
    for k, m in enumerate(messages):
        text, pics = _parts(m.get("content"))
        images += pics
        role = m.get("role")
        if role == "assistant":
            if preserve or k > query:
                text = f"<think>\n{reasoning_of(m).strip()}\n</think>\n\n{text.strip()}"
            out.append({"role": "assistant", "content": text, "loss": k in loss})
            for c in m.get("tool_calls") or []:
                f = c.get("function") or {}
                call = {"name": f.get("name"), "arguments": json.loads(f.get("arguments") or "{}")}
                text = json.dumps(call, ensure_ascii=False)
                out.append({"role": "tool_call", "content": text, "loss": k in loss})
        else:  # (the template trims every content: the text as it is rendered)
            out.append({"role": "tool_response" if role == "tool" else role, "content": text.strip()})
    tools = json.dumps(sample.get("tools") or [], ensure_ascii=False)
    row = {"id": sample["id"], "messages": out, "tools": tools, "images": images}
    return row | ({"weight": sample["weight"]} if "weight" in sample else {})


def from_ms_swift(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[bool]]:
    """An ms-swift row back to chat messages (images as parts, in order) and, per assistant
    message, its loss flag: what export-check renders and compares with the canonical text."""
    images = iter(row.get("images") or [])
    out: list[dict[str, Any]] = []
    flags: list[bool] = []
    for m in row["messages"]:
        role, text = m["role"], m.get("content") or ""
        if role == "tool_call":
            call = json.loads(text)
            out[-1].setdefault("tool_calls", []).append({"type": "function", "function": {
                "name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}})
            continue
        if role == "assistant":
            reasoning, sep, rest = text.partition("\n</think>\n\n")
            msg: dict[str, Any] = {"role": "assistant", "content": text}
            if sep and text.startswith("<think>\n"):
                msg = {"role": "assistant", "content": rest,
                       "reasoning_content": reasoning.removeprefix("<think>\n")}
            out.append(msg)
            flags.append(bool(m.get("loss")))
            continue
        pieces = text.split(IMAGE)
        if len(pieces) > 1:
            content: list[dict[str, Any]] = []
            for j, piece in enumerate(pieces):
                if j:
                    content.append({"type": "image_url", "image_url": {"url": next(images)}})
                if piece:
                    content.append({"type": "text", "text": piece})
            out.append({"role": "tool" if role == "tool_response" else role, "content": content})
        else:
            out.append({"role": "tool" if role == "tool_response" else role, "content": text})
    return out, flags


def reply_regions(sample: dict[str, Any]) -> list[tuple[int, int, dict[str, Any]]]:
    """(start, end, turn) of every reply in the sample text: from its request's rendering's end
    to its `<|im_end|>`."""
    text = sample["text"]
    out = []
    for t in sample["turns"]:
        if "at" in t:
            out.append((t["at"], text.index(END, t["at"]) + len(END), t))
    return out


def tokens(sample: dict[str, Any], tok: Any) -> dict[str, Any]:
    """`input_ids` and `labels` of one sample (see the module docstring)."""
    text, spans = sample["text"], [tuple(s) for s in sample["loss"]]
    ids: list[int] = []
    labels: list[int] = []
    pos = 0
    for start, end, turn in reply_regions(sample):
        _add(ids, labels, tok.encode(text[pos:start]), False)
        span = spans[turn["span"]] if turn.get("span") is not None else None
        sampled = unpack_ids(turn["sampled"]) if turn.get("sampled") and not turn.get("mismatch") else None
        if span is not None and span[0] > start:  # (--reasoning-loss off: the thinking is context)
            _add(ids, labels, tok.encode(text[start:span[0]]), False)
            _add(ids, labels, tok.encode(text[span[0]:end]), True)
        else:
            piece = sampled if sampled is not None else tok.encode(text[start:end])
            _add(ids, labels, piece, span is not None)
        pos = end
    _add(ids, labels, tok.encode(text[pos:]), False)
    images = [u for m in sample["messages"] for u in _parts(m.get("content"))[1]]
    row = {"id": sample["id"], "input_ids": ids, "labels": labels, "images": images}
    return row | ({"weight": sample["weight"]} if "weight" in sample else {})


def _add(ids: list[int], labels: list[int], piece: list[int], on: bool) -> None:
    ids.extend(piece)
    labels.extend(piece if on else [-100] * len(piece))
