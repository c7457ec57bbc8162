"""Real model-written replies from the Duck traces (../shared/duck-traces), for the parsers.

`snippets(n)`: n (visible text, code) pairs, the first `n // 25` code snippets of pass 0 of
each of the 25 public games, in turn order (deterministic: the same 400 every time). The
traces keep each call's code exactly as the model wrote it and the turn's visible text, but
not the thinking text (only its length), so a reply is rebuilt as the model's format:
`{thinking}\\n</think>\\n\\n{text}\\n\\n<tool_call>\\n<function=python>\\n<parameter=code>\\n{code}
\\n</parameter>\\n</function>\\n</tool_call>` with a fixed sentence of thinking.

`corpus()`: texts to train the stand-in tokenizer's merges on (qwen_tiny.py), other
snippets than those measured (passes 5-9), so that token lengths are like a trained
tokenizer's on code without being fitted to the measured replies.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from duck.paths import SHARED

TRACES = SHARED / "duck-traces"
THINKING = "The board changed; I will look at it and then act."


def _turns(path: Path, passes: set[int]):
    with gzip.open(path, "rt") as f:
        for line in f:
            t = json.loads(line)
            if t["pass"] in passes:
                yield t


def snippets(n: int = 400, traces: Path = TRACES) -> list[tuple[str, str]]:
    files = sorted((traces / "turns").glob("*.jsonl.gz"))
    per = max(1, n // max(1, len(files)))
    out: list[tuple[str, str]] = []
    for path in files:
        got = 0
        for t in _turns(path, {0}):
            for c in t.get("calls") or []:
                code = c.get("code") or ""
                if code.strip() and got < per:
                    out.append(((t.get("content") or "").split("\n\n")[0][:600], code))
                    got += 1
            if got >= per:
                break
    return out[:n]


def reply(text: str, code: str, thinking: str = THINKING) -> str:
    """What the model writes after the prompt's `<think>\\n`, in its own format."""
    return (f"{thinking}\n</think>\n\n{text}\n\n<tool_call>\n<function=python>\n<parameter=code>\n{code}\n"
            "</parameter>\n</function>\n</tool_call>")


def corpus(traces: Path = TRACES, chars: int = 3_000_000) -> list[str]:
    out, total = [], 0
    for path in sorted((traces / "turns").glob("*.jsonl.gz")):
        for t in _turns(path, {5, 6, 7, 8, 9}):
            for text in [t.get("content") or ""] + [c.get("code") or "" for c in t.get("calls") or []]:
                if text:
                    out.append(text)
                    total += len(text)
            if total >= chars * (sorted((traces / "turns").glob("*.jsonl.gz")).index(path) + 1) / 25:
                break
    return out
