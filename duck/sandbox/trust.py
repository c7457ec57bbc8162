"""What the host accepts from its worker: every message checked against its op's shape and
cut to size, every value made safe to render, record and send to a model server.

The worker runs model code, so after the first snippet anything on its pipe may be forged:
fields of the wrong type, strings of any length, lone surrogates (which no UTF-8 writer
accepts), containers nested beyond any recursion limit, NaN. `clean` turns any JSON value
into a bounded one (depth, items, characters) without recursion deeper than its own limit;
`check` validates one message and raises `Misbehaved` (the host then kills and restarts the
worker and tells the model why).
"""

from __future__ import annotations

import math
from typing import Any

from duck.game.actions import MAX_NAME
from duck.sandbox.wire import WireError

MAX_DEPTH = 12
MAX_ITEMS = 500
MAX_STR = 20_000
TOO_DEEP = "<nested too deep>"


class Misbehaved(WireError):
    """The worker sent a message the protocol does not allow."""


def text(value: Any, limit: int = MAX_STR) -> str:
    """Any string as valid UTF-8 text (lone surrogates become U+FFFD), cut to `limit`."""
    s = value if isinstance(value, str) else str(value)
    if len(s) > limit:
        s = s[:limit] + f"... [{len(s) - limit} chars cut]"
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate becomes "?"


def clean(value: Any, depth: int = 0, *, budget: list[int] | None = None) -> Any:
    """A JSON value bounded in depth, items and size, with valid strings and finite numbers.
    `budget`: what is left for the whole value (shared across the recursion); every node,
    container or scalar, costs 1 and a string or key its characters too (issue 37: nested
    one-key dicts, counted by their characters only, cost the host 37 times their bytes)."""
    if budget is None:
        budget = [200_000]
    budget[0] -= 1
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 1 << 63 else str(value)[:40]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        s = text(value, max(0, min(MAX_STR, budget[0])))
        budget[0] -= len(s)
        return s
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS or budget[0] <= 0:
                out["..."] = f"{len(value) - i} more keys cut"
                break
            key = text(k, 200)
            budget[0] -= len(key)
            out[key] = clean(v, depth + 1, budget=budget)
        return out
    if isinstance(value, (list, tuple)):
        out_l = []
        for i, v in enumerate(value):
            if i >= MAX_ITEMS or budget[0] <= 0:
                out_l.append(f"... {len(value) - i} more items cut")
                break
            out_l.append(clean(v, depth + 1, budget=budget))
        return out_l
    return text(repr(value)[:200])


_SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    "ready": {"pid": (int,), "layers": (dict,)},
    "userns": {},
    "synced": {"n": (int,)},
    "out": {"text": (str,)},
    "tail": {"text": (str,), "total": (int,)},
    "action": {"actions": (list,)},
    "done": {"kind": (str, type(None)), "error": (str, type(None)), "total": (int,),
             "tail": (str,), "notes": (dict, type(None)), "notes_error": (str, type(None)),
             "dropped": (list,), "restored": (str,)},
    "forked": {"pid": (int,)},
    "ended": {"status": (int,)},
}
_OPTIONAL = {"notes", "notes_error", "result", "dropped", "restored"}
MAX_ACTIONS_PER_REQUEST = 1000


def check(msg: dict[str, Any], allowed: tuple[str, ...], call: int | None = None) -> dict[str, Any]:
    """`msg` if it is one of the `allowed` ops with fields of the right types, and, with `call`,
    stamped with that call's id (issue 37: nothing else binds a message to its call); else
    Misbehaved."""
    op = msg.get("op")
    if op not in allowed:
        raise Misbehaved(f"unexpected message {text(op, 40)!r}")
    if call is not None and (type(msg.get("call")) is not int or msg["call"] != call):
        raise Misbehaved(f"a message of call {text(msg.get('call'), 20)} in call {call}")
    for key, types in _SHAPES.get(op, {}).items():
        if key not in msg:
            if key in _OPTIONAL:
                continue
            raise Misbehaved(f"{op} message without {key!r}")
        v = msg[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise Misbehaved(f"{op} message with a {type(v).__name__} {key!r}")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            raise Misbehaved(f"{op} message with a negative {key!r}")
    if op == "action":
        items = msg["actions"]
        if not items or len(items) > MAX_ACTIONS_PER_REQUEST:
            raise Misbehaved(f"action request of {len(items)} actions")
        for it in items:
            if not isinstance(it, dict) or not isinstance(it.get("action"), str) or len(it) > 3 \
                    or any(k not in ("action", "row", "col") for k in it):
                raise Misbehaved("malformed action request")
            if len(it["action"]) > MAX_NAME:  # the worker refuses longer names itself (views._name)
                raise Misbehaved(f"action name of {len(it['action'])} characters")
            for k in ("row", "col"):
                if k in it and not (it[k] is None or isinstance(it[k], (int, float, str))) \
                        or isinstance(it.get(k), str) and len(it[k]) > MAX_NAME:
                    raise Misbehaved("malformed action request")
    return msg
