"""The pipe protocol between the kernel host and its worker process.

One message = 8-byte header (JSON length, blob length) + UTF-8 JSON + a binary blob. Boards
travel in the blob as raw int8 bytes (4 KB each), so a new observation costs one small
write, never a re-serialisation of the history. The host parses only JSON from the worker
(never pickle), so model code that scribbles on the pipe can at worst get itself restarted.

The host never waits on its worker without a deadline: `send(..., deadline=)` writes to a
non-blocking pipe and gives up (WireError) when a worker that does not read lets the deadline
pass; `Reader(fd, max_message=, max_nodes=)` refuses messages larger than the host accepts
or holding more JSON values (counted before parsing), and any JSON it cannot parse (nested
beyond the parser's recursion limit included) is a WireError; `recv(deadline)` returns None
once the deadline has passed, even with whole messages buffered.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

_HDR = struct.Struct("<II")
MAX_MESSAGE = 256 << 20  # anything larger is garbage on the pipe
# JSON values one message may hold, counted before it is parsed: an upper bound from its
# brackets and commas (those inside strings too). 8 MB of one-key dicts parsed into ~585 MB
# of Python objects (issue 37); 100,000 nodes are at most ~25 MB. The worker cuts what it sends
# to fit (`nodes`: duck.sandbox.call.sized).
MAX_NODES = 100_000


def nodes(data: bytes) -> int:
    """An upper bound on the JSON values in `data` (C-speed counts, no parsing)."""
    return data.count(b"[") + data.count(b"{") + data.count(b",") + 1


class WireError(RuntimeError):
    """The other side closed the pipe or sent something unreadable."""


class PipeClosed(WireError):
    """The other side is gone (its end of the pipe is closed)."""


def send(fd: int, obj: dict[str, Any], blob: bytes = b"", deadline: float | None = None) -> None:
    """Write one message. With a `deadline` (the host's side, whose write end is non-blocking)
    a reader that does not keep up raises WireError instead of blocking forever."""
    data = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass")
    view = memoryview(_HDR.pack(len(data), len(blob)) + data + blob)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError("the kernel worker stopped reading its pipe")
            _, ready, _ = select.select([], [fd], [], left)
            if not ready:
                continue
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionError) as e:
            raise PipeClosed(f"pipe closed ({e})") from None
        view = view[n:]


class Reader:
    """Buffered reads of whole messages, with an optional deadline (host side)."""

    def __init__(self, fd: int, max_message: int = MAX_MESSAGE, max_nodes: int | None = None) -> None:
        self.fd = fd
        self.max_message = max_message
        self.max_nodes = max_nodes
        self.buf = bytearray()

    def _fill(self, n: int, deadline: float | None) -> bool:
        while len(self.buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready, _, _ = select.select([self.fd], [], [], left)
                if not ready:
                    return False
            chunk = os.read(self.fd, max(65536, n - len(self.buf)))
            if not chunk:
                raise PipeClosed("pipe closed")
            self.buf += chunk
        return True

    def pending(self) -> bool:
        """Whether anything is buffered or waiting on the pipe now (never blocks)."""
        return bool(self.buf) or bool(select.select([self.fd], [], [], 0)[0])

    def recv(self, deadline: float | None = None) -> tuple[dict[str, Any], bytes] | None:
        """The next message, or None if the deadline passed first, even with whole messages
        buffered (issue 37: thirty queued requests kept a call alive 75 s). Nothing is lost: a
        partly read message stays buffered for the next call."""
        if deadline is not None and time.monotonic() >= deadline:
            return None
        if not self._fill(_HDR.size, deadline):
            return None
        jlen, blen = _HDR.unpack_from(self.buf)
        if jlen + blen > self.max_message:
            raise WireError(f"message of {jlen + blen} bytes")
        total = _HDR.size + jlen + blen
        if not self._fill(total, deadline):
            return None
        data = bytes(self.buf[_HDR.size:_HDR.size + jlen])
        if self.max_nodes is not None and nodes(data) > self.max_nodes:
            raise WireError(f"a message of {nodes(data)} JSON values or more")
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise WireError(f"unreadable message: {e}") from None
        if not isinstance(obj, dict):
            raise WireError("message is not an object")
        blob = bytes(self.buf[_HDR.size + jlen:total])
        del self.buf[:total]
        return obj, blob
