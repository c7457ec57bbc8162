"""The served model's chat template, rendered as vLLM applies it: the one renderer (stub, export).

`ChatTemplate.render(messages, tools, preserve_thinking, thinking)` gives the prompt text vLLM
would feed the model, and its image count, so that a server can count prompt tokens and emulate
the prefix cache on the real layout. The template is the served model's, read at run time
(Qwen3.8's, `../shared/qwen3.8/chat_template.jinja`, by default; `QWEN36_TEMPLATE` is Qwen3.6's;
`DUCK_SHARED_DIR`, `DUCK_CHAT_TEMPLATE` or a path name another) and never copied into the
repository; without it a logged warning and the old approximation of Qwen3.6's layout
(`render_approx`) stand in. The rule: render exactly what the pinned vLLM (0.33) renders: the
template compiled as transformers' `apply_chat_template` compiles it, the messages prepared as
vLLM's chat_utils prepares them (`ordered_content`), the request's `chat_template_kwargs` with
`add_generation_prompt=True`. Each step, and where vLLM 0.19 differed: docs/testing.md, "The
renderer". `keyed` returns the text with each image's content hash after its pad (every image
renders as the same pad, and vLLM's prefix cache tells them apart by hash).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from duck.paths import SHARED

log = logging.getLogger(__name__)

IMAGE_PAD = "<|image_pad|>"
VISION = f"<|vision_start|>{IMAGE_PAD}<|vision_end|>"
DEFAULT_TEMPLATE = SHARED / "qwen3.8" / "chat_template.jinja"
QWEN36_TEMPLATE = SHARED / "qwen3.6" / "chat_template.jinja"
KEYED_VISION = re.compile(r"<\|vision_start\|><\|image_pad\|>[0-9a-f]{0,12}(?:<\|vision_end\|>)?")


class HistoryError(ValueError):
    """A request vLLM 0.19 refuses with HTTP 400 before rendering (or the template raised)."""


def template_path() -> Path:
    return Path(os.environ.get("DUCK_CHAT_TEMPLATE") or DEFAULT_TEMPLATE)


@lru_cache(maxsize=4)
def _compile(source: str) -> Any:
    """The template compiled as transformers' apply_chat_template compiles it."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTemplate:
    """The real chat template (None: the approximation, with a warning)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else template_path()
        self.source = self.path.read_text() if self.path.is_file() else None
        if self.source is None:
            log.warning("no chat template at %s: the stub server renders an approximation of Qwen3.6's layout",
                        self.path)

    @property
    def real(self) -> bool:
        return self.source is not None

    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None = None,
               preserve_thinking: bool | None = None, thinking: bool = True,
               add_generation_prompt: bool = True) -> tuple[str, int]:
        """The prompt text and its image count; raises HistoryError where vLLM answers 400."""
        if self.source is None:
            return render_approx(vllm_messages(messages, ordered=False), tools, preserve_thinking, thinking,
                                 add_generation_prompt)
        msgs = vllm_messages(messages)
        import jinja2
        kwargs: dict[str, Any] = {"enable_thinking": thinking}
        if preserve_thinking is not None:
            kwargs["preserve_thinking"] = preserve_thinking
        try:
            text = _compile(self.source).render(messages=msgs, tools=tools or None,
                                                add_generation_prompt=add_generation_prompt, **kwargs)
        except jinja2.exceptions.TemplateError as e:
            raise HistoryError(f"chat template error: {e}") from e
        return text, text.count(IMAGE_PAD)


def vllm_messages(messages: list[dict[str, Any]], ordered: bool = True) -> list[dict[str, Any]]:
    """The messages as the pinned vLLM hands them to the template (see the module docstring;
    `ordered=False`: content lists flattened as vLLM 0.19 did)."""
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = (ordered_content if ordered else string_content)(m["content"])
        if m.get("role") == "assistant":
            reasoning = m.pop("reasoning", None)
            other = m.pop("reasoning_content", None)
            reasoning = reasoning if isinstance(reasoning, str) else other
            if isinstance(reasoning, str):
                m["reasoning_content"] = reasoning
            calls = []
            for c in m.get("tool_calls") or []:
                f = dict(c.get("function") or {})
                try:
                    f["arguments"] = json.loads(f.get("arguments") or "{}")  # ("" is {} to vLLM)
                except ValueError as e:
                    raise HistoryError(f"messages[{i}]: tool call arguments are not valid JSON "
                                       f"(JSONDecodeError: {e})") from e
                calls.append(dict(c, function=f))
            if calls:
                m["tool_calls"] = calls
        out.append(m)
    return out


def ordered_content(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A content list as vLLM 0.33 hands it to the template: the parts in their order."""
    return [{"type": "image"} if p.get("type") in ("image_url", "image") else {"type": "text", "text": p.get("text", "")}
            for p in parts if isinstance(p, dict) and p.get("type") in ("text", "image_url", "image")]


def string_content(parts: list[dict[str, Any]]) -> str:
    """A content list as vLLM 0.19 flattens it for this template (it detects the template's
    content format as "string": the loop over parts is inside a macro): the texts joined by
    newlines, each image's placeholder in front (vllm/entrypoints/chat_utils.py,
    `_get_full_multimodal_text_prompt`)."""
    texts = [p.get("text", "") for p in parts if p.get("type") == "text"]
    images = [f"<|vision_start|>{IMAGE_PAD}<|vision_end|>" for p in parts if p.get("type") in ("image_url", "image")]
    text = "\n".join(texts)
    return "\n".join(images + [text]) if text else "\n".join(images)


_DEFAULT: dict[str, ChatTemplate] = {}


def default_template() -> ChatTemplate:
    """One ChatTemplate per template path (read once)."""
    key = str(template_path())
    if key not in _DEFAULT:
        _DEFAULT[key] = ChatTemplate()
    return _DEFAULT[key]


def image_hashes(messages: list[dict[str, Any]]) -> list[str]:
    """The content hash of every image part, in prompt order."""
    out = []
    for m in messages:
        content = m.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                url = (part.get("image_url") or {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
                out.append(hashlib.sha1(url.encode()).hexdigest()[:12])
    return out


def keyed(text: str, hashes: list[str]) -> str:
    """`text` with each image's hash after its pad: equal prefixes then mean equal KV."""
    parts = text.split(IMAGE_PAD)
    if len(parts) - 1 != len(hashes):
        return text
    return parts[0] + "".join(f"{IMAGE_PAD}{h}{p}" for h, p in zip(hashes, parts[1:]))


# ---------------------------------------------------------------------------------------
# The approximation (only when the real template is absent)

def _text_of(content: Any) -> tuple[str, int]:
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    out, images = [], 0
    for part in content:
        if part.get("type") == "text":
            out.append(part.get("text", ""))
        elif part.get("type") in ("image_url", "image"):
            out.append(f"<|vision_start|>{IMAGE_PAD}<|vision_end|>")
            images += 1
    return "".join(out), images


def render_approx(messages: list[dict[str, Any]], tools: list[dict] | None = None,
                  preserve_thinking: bool | None = None, thinking: bool = True,
                  add_generation_prompt: bool = True) -> tuple[str, int]:
    """The Qwen3.6 template's layout, approximately (tools listed, thinking kept or dropped
    per `preserve_thinking`, tool results wrapped in `<tool_response>`). Like the real
    templates it refuses a history with no user message ("No user query found")."""
    last_query = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if last_query is None:
        raise HistoryError("chat template error: No user query found in messages.")
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
            keep = bool(preserve_thinking) or i > last_query
            body = f"<think>\n{(m.get('reasoning_content') or '').strip()}\n</think>\n\n" if keep else ""
            body += text.strip()
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                args = f.get("arguments") if isinstance(f.get("arguments"), dict) else {}
                params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
                body += f"\n\n<tool_call>\n<function={f.get('name')}>\n{params}</function>\n</tool_call>"
            out.append(f"<|im_start|>assistant\n{body}<|im_end|>\n")
        elif role == "tool":
            first = i == 0 or messages[i - 1].get("role") != "tool"
            last = i + 1 == len(messages) or messages[i + 1].get("role") != "tool"
            out.append(("<|im_start|>user" if first else "") + f"\n<tool_response>\n{text}\n</tool_response>"
                       + ("<|im_end|>\n" if last else ""))
    if add_generation_prompt:
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
