"""A stand-in for the served model's tokenizer: token counts with the field's chars/token per kind.

No Qwen3.8 tokenizer is on this machine (no weights), and a flat chars/3.6 would hide that the
same characters cost very different tokens by kind. This counts byte-level-BPE-like pieces so
that, over the Duck's traces, English comes out at ~3.6-3.8 characters per token, Python at ~2.4
and tool results (numbers, grids of colour letters) at ~1.6, inside or at the edge of the ranges
measured on Qwen3.8's tokenizer (English 3.5-4.2, code 2.2-2.7, tool results 1.0-1.6: FIELD §3):

* a special token (`<|im_start|>`, ...) or a think/tool tag is one token; a digit is one token
  (Qwen splits numbers into digits);
* a word is one token per 10 letters, with its leading space; a run of capitals or mixed case (a
  grid row, an identifier like `RGB`) one per letter;
* a run of spaces one per 8, a run of newlines one, any other symbol one per one or two.

`count(text)` caches per message block (the text between two `<|im_start|>`), so a growing
history is counted once; `token_ids(text)` gives stable ids for `/tokenize`.
"""

from __future__ import annotations

import math
import re
import zlib
from functools import lru_cache
from typing import Any, Iterator

from duck.llm.render import KEYED_VISION, VISION
from duck.llm.tokens import image_tokens as part_image_tokens

PIECE = re.compile(r"<\|[a-z_]+\|>|</?(?:think|tool_call|tool_response)>|\d| ?[A-Za-z]+| +|\n+|\s"
                   r"| ?[^\sA-Za-z\d]{1,2}")
VOCAB = 248_000  # about Qwen3.8's


@lru_cache(maxsize=65536)
def _piece(p: str) -> tuple[int, ...]:
    """The ids of one piece (its crc, one id per token it counts)."""
    w = p.lstrip(" ")
    if w[:1].isalpha():
        n = math.ceil(len(w) / 10) if w.islower() or (w[0].isupper() and w[1:].islower()) else len(w)
    elif w == "" and len(p) > 1:
        n = math.ceil(len(p) / 8)
    else:
        n = 1
    h = zlib.crc32(p.encode())
    return tuple((h + k) % VOCAB for k in range(n))


def pieces(text: str) -> Iterator[tuple[str, int]]:
    """(piece, tokens) over `text`."""
    for p in PIECE.findall(text):
        yield p, len(_piece(p))


START = "<|im_start|>"
START_ID = zlib.crc32(START.encode()) % VOCAB


@lru_cache(maxsize=16384)
def _block(text: str) -> tuple[int, ...]:
    """The ids of one block: a piece's crc, one id per token it counts."""
    return tuple(i for p in PIECE.findall(text) for i in _piece(p))


def count(text: str) -> int:
    """Tokens of `text` (cached per `<|im_start|>` block)."""
    blocks = text.split(START)
    return sum(len(_block(b)) for b in blocks) + len(blocks) - 1


def token_ids(text: str) -> list[int]:
    """Stable token ids of `text` (as `count` counts them)."""
    out: list[int] = []
    for i, b in enumerate(text.split(START)):
        if i:
            out.append(START_ID)
        out.extend(_block(b))
    return out


# Token counts of rendered prompts (the renderer is duck.llm.render)

CHARS_PER_TOKEN = 3.6  # English on the stand-in tokenizer (what scripted replies are sized by)
IMAGE_TOKENS = 66  # a 256x256 board on Qwen3.6/3.8: 64 merged patches + the two vision markers


def approx_tokens(text: str) -> int:
    """Tokens of plain text on the stand-in tokenizer."""
    return count(text)


def prompt_tokens(text: str, images: int | list[int]) -> int:
    """Tokens of a rendered prompt: its text, each image's pad expanded to its tokens (a list:
    per image, in order; a number: that many images of IMAGE_TOKENS)."""
    per = images if isinstance(images, list) else [IMAGE_TOKENS] * images
    return count(text.replace(VISION, "")) + sum(per)


def suffix_tokens(keyed_text: str, start: int, images: list[int]) -> int:
    """Tokens of `keyed_text[start:]` (a prompt as `keyed` gives it), its images counted as
    the last ones of `images`: what a prefix cache holding `keyed_text[:start]` leaves to compute."""
    tail = keyed_text[start:]
    n = len(KEYED_VISION.findall(tail))
    return count(KEYED_VISION.sub("", tail)) + sum(images[len(images) - n:] if n else [])


def image_token_list(messages: list[dict[str, Any]]) -> list[int]:
    """Each image part's tokens, in prompt order."""
    return [part_image_tokens(p) for m in messages if isinstance(m.get("content"), list)
            for p in m["content"] if isinstance(p, dict) and p.get("type") in ("image_url", "image")]
