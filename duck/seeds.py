"""Stable numbers from names: seeds and spreads that are the same in every process and Python.

Python's own `hash()` of a string changes from one process to the next (PYTHONHASHSEED), so
everything that derives a number from (seed, game, pass, ...) goes through `stable_hash`: the
per-game seed of a policy, the per-request seed of the model, a game's first endpoint, the arm
of an A/B pair queued first.
"""

from __future__ import annotations

import zlib


def stable_hash(*parts: object) -> int:
    """A 32-bit number from `parts` (joined by ':' as text): CRC-32, stable everywhere."""
    return zlib.crc32(":".join(str(p) for p in parts).encode())
