"""Prompt rendering for the stub server: the Qwen3.6 chat template's layout (the parts
that decide tokens and prefixes), an approximate token count, and common-prefix length.

`render` lays a request out as the template would (thinking kept or dropped per
`preserve_thinking`, tool results wrapped in `<tool_response>`, one placeholder per image),
so that duck.testing.stub.server can count prompt tokens and emulate the prefix cache.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

CHARS_PER_TOKEN = 3.6
IMAGE_TOKENS = 66


def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# ---------------------------------------------------------------------------------------
# Rendering like the Qwen3.6 chat template (the parts that decide tokens and prefixes)

def _text_of(content: Any) -> tuple[str, int]:
    """Rendered text of a message's content, and the number of images in it."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    out, images = [], 0
    for part in content:
        if part.get("type") == "text":
            out.append(part.get("text", ""))
        elif part.get("type") in ("image_url", "image"):
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
            out.append(f"<|vision_start|><img {hashlib.sha1(url.encode()).hexdigest()[:12]}><|vision_end|>")
            images += 1
    return "".join(out), images


def render(messages: list[dict[str, Any]], tools: list[dict] | None = None,
           preserve_thinking: bool | None = None, thinking: bool = True) -> tuple[str, int]:
    """The prompt text and its image count, as the Qwen3.6 template lays it out."""
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user":
            last_query = i
            break
    out, images = [], 0
    for i, m in enumerate(messages):
        role = m.get("role")
        text, n = _text_of(m.get("content"))
        images += n
        if role == "system":
            out.append(f"<|im_start|>system\n{text}")
            if tools:
                out.append("\n\n# Tools\n" + "\n".join(json.dumps(t, sort_keys=True) for t in tools))
            out.append("<|im_end|>\n")
        elif role == "user":
            out.append(f"<|im_start|>user\n{text}<|im_end|>\n")
        elif role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("reasoning") or ""
            keep = bool(preserve_thinking) or i > last_query
            body = f"<think>\n{reasoning.strip()}\n</think>\n\n" if keep else ""
            body += text.strip()
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                try:
                    args = json.loads(f.get("arguments") or "{}")
                except ValueError:
                    args = {"_raw": f.get("arguments")}
                params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in
                                 (args.items() if isinstance(args, dict) else []))
                body += f"\n\n<tool_call>\n<function={f.get('name')}>\n{params}</function>\n</tool_call>"
            out.append(f"<|im_start|>assistant\n{body}<|im_end|>\n")
        elif role == "tool":
            first = i == 0 or messages[i - 1].get("role") != "tool"
            last = i + 1 == len(messages) or messages[i + 1].get("role") != "tool"
            out.append(("<|im_start|>user" if first else "") + f"\n<tool_response>\n{text}\n</tool_response>"
                       + ("<|im_end|>\n" if last else ""))
    out.append("<|im_start|>assistant\n" + ("<think>\n" if thinking else "<think>\n\n</think>\n\n"))
    return "".join(out), images


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of two strings (binary search over C-speed compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
