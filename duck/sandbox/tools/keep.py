"""Keeping the model's simulator: its source in `notes['simulator']`, restored after a restart.

Part of the world-model tools (duck.sandbox.tools); runs inside the kernel's worker. The
functions the model gives `check` and `plan` (its `step`, `encode`, `is_goal`, ...) are what
it has learnt; the namespace holds them across GAME_OVER, levels and fresh conversations, but
a kernel restart (a time-out that had to kill the worker) loses them. So each `check`/`plan`
writes their source into the notes dict, which the host keeps and gives back to a new worker,
whose first call defines them again (`restore`).

The source is each named function as written in its cell, plus what it uses from the
namespace: other functions defined in cells, modules (`import numpy as np`), and plain
constants (numbers, strings, tuples/lists/sets/dicts of them, small numpy arrays) written as
literals. Names it cannot keep (big arrays, objects) are listed, so the model knows what to
recompute. Lambdas and nested functions are not kept (their source is not a definition).
"""

from __future__ import annotations

import inspect
import json
import linecache
import re
import types
from typing import Any, Iterable

import numpy as np

KEY = "simulator"
MAX_CHARS = 6000  # of source; the notes dict as a whole is capped by duck.sandbox.host.NOTES_CHARS
_FILE = "<simulator>"


def _cell_function(v: Any) -> bool:
    return (isinstance(v, types.FunctionType) and v.__name__ != "<lambda>" and "<locals>" not in v.__qualname__
            and (v.__code__.co_filename.startswith("<cell-") or v.__code__.co_filename == _FILE))


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _literal(v: Any, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return True
    if depth > 4:
        return False
    if isinstance(v, (tuple, list, set, frozenset)):
        return all(_literal(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(_literal(k, depth + 1) and _literal(x, depth + 1) for k, x in v.items())
    return False


def _constant(name: str, v: Any) -> str | None:
    if isinstance(v, np.ndarray):
        if v.size > 1024 or v.dtype.kind not in "biuf":
            return None
        return f"{name} = np.array({v.tolist()!r}, dtype={str(v.dtype)!r})"
    if _literal(v):
        text = f"{name} = {v!r}"
        return text if len(text) <= 3000 else None
    return None


def source(ns: dict[str, Any], functions: Iterable[Any], published: set[str]) -> tuple[str, list[str], list[str]]:
    """(source text, names kept, names used but not kept) of `functions` and what they use."""
    order: list[Any] = []
    seen: set[str] = set()
    imports: dict[str, str] = {}
    constants: dict[str, str] = {}
    missing: list[str] = []
    work = [f for f in functions if _cell_function(f)]
    while work:
        f = work.pop(0)
        if f.__name__ in seen:
            continue
        seen.add(f.__name__)
        order.append(f)
        for name in sorted(_names(f.__code__)):
            if name in seen or name in published or name in imports or name in constants or name not in ns:
                continue
            v = ns[name]
            if _cell_function(v):
                work.append(v)
            elif isinstance(v, types.ModuleType):
                imports[name] = (f"import {v.__name__}" if v.__name__ == name else f"import {v.__name__} as {name}")
            elif (text := _constant(name, v)) is not None:
                constants[name] = text
                if isinstance(v, np.ndarray) and "np" not in imports:
                    imports["np"] = "import numpy as np"
            elif not callable(v) or isinstance(v, type):
                missing.append(name)
    parts = []
    for f in sorted(order, key=lambda f: (f.__code__.co_filename, f.__code__.co_firstlineno)):
        try:
            parts.append(inspect.getsource(f).rstrip())
        except (OSError, TypeError):
            missing.append(f.__name__)
    text = "\n".join([*imports.values(), *constants.values()]) + "\n\n" + "\n\n".join(parts)
    return text.strip() + "\n", [f.__name__ for f in order] + list(constants), sorted(set(missing))


def keep(ns: dict[str, Any], functions: Iterable[Any], published: set[str], notes_limit: int) -> str:
    """Write the source into ns['notes'][KEY]; a short line saying what was kept (or why not)."""
    notes = ns.get("notes")
    if not isinstance(notes, dict):
        return ""
    functions = [f for f in functions if _cell_function(f)]
    # What was kept before stays kept (plan() is not given encode, check() not the actions),
    # unless redefined by name or no longer defined.
    old = notes.get(KEY) if isinstance(notes.get(KEY), str) else ""
    names = {f.__name__ for f in functions}
    earlier = [ns[n] for n in re.findall(r"^def (\w+)", old, re.MULTILINE)
               if n not in names and _cell_function(ns.get(n))]
    try:
        text, kept, missing = source(ns, functions + earlier, published)
        if len(text) > MAX_CHARS and earlier:
            text, kept, missing = source(ns, functions, published)
    except Exception as e:  # noqa: BLE001 - never let bookkeeping break the model's call
        return f"simulator not kept ({type(e).__name__}: {e})"
    if not kept:
        return ""
    if len(text) > MAX_CHARS:
        return f"simulator not kept: its source is {len(text)} chars (limit {MAX_CHARS})"
    others = {k: v for k, v in notes.items() if k != KEY}
    try:
        room = notes_limit - len(json.dumps(others, default=str)) - 50
    except (TypeError, ValueError):
        room = notes_limit
    if len(json.dumps(text)) > room:
        return f"simulator not kept: the notes have room for {max(0, room)} more chars, it needs {len(text)}"
    notes[KEY] = text
    line = f"kept in notes['simulator']: {', '.join(kept)}"
    if missing:
        line += f" (not kept, recompute after a restart: {', '.join(missing)})"
    return line


def restore(ns: dict[str, Any]) -> str | None:
    """Define the kept simulator again in a new worker's namespace (a restart lost it)."""
    notes = ns.get("notes")
    text = notes.get(KEY) if isinstance(notes, dict) else None
    if not isinstance(text, str) or not text.strip():
        return None
    linecache.cache[_FILE] = (len(text), None, text.splitlines(True), _FILE)
    try:
        exec(compile(text, _FILE, "exec"), ns)
    except Exception as e:  # noqa: BLE001 - the model's code; it sees the failure when it uses a name
        return f"the kept simulator could not be restored: {type(e).__name__}: {e}"
    return "restored the simulator from notes['simulator']"
