"""What an image costs in prompt tokens on the Qwen3-VL vision encoder (Qwen3.6/3.8 and
Flash-Next share it): the image processor's geometry, not a guess.

The processor resizes an image to multiples of 32 pixels within [min_pixels, max_pixels]
(`smart_resize`, as in transformers' Qwen2-VL/Qwen3-VL image processors), cuts it into 16x16
patches and merges 2x2 patches into one token, between `<|vision_start|>` and `<|vision_end|>`.
So a 64x64 board at 10x (640x640 px) is 20 x 20 = 400 tokens + 2 = 402 (FIELD §3: "640 px ≈ 402
tokens"), at 4x (256x256) 8 x 8 + 2 = 66.
"""

from __future__ import annotations

import math

PATCH = 16
MERGE = 2
MIN_PIXELS = 256 * 256  # Qwen3-VL's preprocessor defaults
MAX_PIXELS = 4096 * 4096
MARKERS = 2  # <|vision_start|> and <|vision_end|>


def smart_resize(height: int, width: int, factor: int = PATCH * MERGE, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(height, width) the processor resizes an image to."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def image_tokens(width: int, height: int, *, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> int:
    """Prompt tokens of one image of width x height pixels, its two markers included."""
    if width <= 0 or height <= 0:
        return 0
    h, w = smart_resize(height, width, min_pixels=min_pixels, max_pixels=max_pixels)
    return (h // PATCH) * (w // PATCH) // (MERGE * MERGE) + MARKERS
