"""The sandbox's two dialects: how model code is run and answered, chosen once per kernel.

`OURS` is what our agent plays with: all builtins, numpy and the standard library (minus the
process, thread, network and host modules `duck.sandbox.guard` refuses), one persistent
namespace, our additions to the Duck's API (`last_animation`, `notes`, an animation summary in
each action result: DESIGN §3), tracebacks with source lines, printed output cut to a head and
a tail, stderr shown, RESET playable after GAME_OVER, the names UNDO and CLICK, and clicks written as
the results display them (`'MOUSE(row=20, col=20)'`).

`DUCK` is the old agent's sandbox (../shared/duck-traces/README.md, "Sandbox API"), so that its
recorded code prints what it printed then (`duck replay`): its 53 builtins and 14 importable
modules, a fresh namespace per call (it started a process per call), recursion limit 1,000,
its traceback (snippet frames only, no source) and syntax-error texts, output cut to its head,
stderr dropped, none of our additions, its result messages, every action refused after
GAME_OVER (its runner reset by itself), and `valid_actions` as the last result gave it until
the next turn.

`Kernel(session, config, dialect=DUCK)` takes one for its life; the worker process gets its
name once at start and looks it up in `DIALECTS`.
"""

from __future__ import annotations

import builtins
import os
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Literal

from duck.game.actions import DUCK_DIALECT_NAMES, OUR_DIALECT_NAMES, ModelNames
from duck.sandbox.guard import kernel_import
from duck.sandbox.render import render_duck_dialect, render_our_dialect

DialectName = Literal["ours", "duck"]


@dataclass(frozen=True)
class Dialect:
    name: DialectName
    names: ModelNames  # what `valid_actions` lists and `action()` accepts
    builtins: Callable[[], dict[str, Any]]  # a new namespace's __builtins__, its __import__ included
    fresh_namespace: bool  # every call starts from a new namespace
    recursion_limit: int
    additions: bool  # last_animation, notes, the animation summary in action results
    cell_filename: Callable[[int], str]  # the snippet's file name in tracebacks, by call number
    syntax_error: Callable[[BaseException], str]
    format_error: Callable[[BaseException, str], str]  # (exception, the snippet's file name)
    render: Callable[..., dict[str, Any]]  # CallResult -> the tool message (duck.sandbox.render)
    output_tail: bool  # printed output keeps its tail as well as its head
    stderr_shown: bool
    reset_after_game_over: bool  # False: every action gets the terminal result after GAME_OVER
    valid_actions_from_results: bool  # `valid_actions` is the last result's list until new_turn()

    def output_split(self, chars: int) -> tuple[int, int]:
        """(head, tail) characters of printed output kept of `chars` in all."""
        return (chars // 2, chars - chars // 2) if self.output_tail else (chars, 0)


def _stack(exc: BaseException, keep: int = 30) -> traceback.StackSummary:
    """The traceback's frames; of a very deep one (runaway recursion) only the first and
    last `keep`, so formatting stays fast."""
    pairs = []
    tb = exc.__traceback__
    while tb is not None:
        pairs.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    if len(pairs) > 2 * keep:
        pairs = pairs[:keep] + pairs[-keep:]
    return traceback.StackSummary.extract(iter(pairs), lookup_lines=False)


# --- ours ----------------------------------------------------------------------------------

_SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _our_error(exc: BaseException, filename: str) -> str:
    """The snippet's frames with their source lines, plus the library frame where it failed
    (never the sandbox's own frames, e.g. inside `action()`)."""
    tb = _stack(exc)
    keep = [f for f in tb if f.filename.startswith("<cell-")]
    if tb and not tb[-1].filename.startswith("<cell-") and not tb[-1].filename.startswith(_SANDBOX_DIR):
        keep.append(tb[-1])
    out = ["Traceback (most recent call last):\n"] + traceback.format_list(keep)
    out += traceback.format_exception_only(exc)
    return "".join(out).rstrip()


def _our_syntax_error(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).rstrip()


def _our_builtins() -> dict[str, Any]:
    return dict(builtins.__dict__) | {"__import__": kernel_import}


OURS = Dialect(
    name="ours", names=OUR_DIALECT_NAMES, builtins=_our_builtins, fresh_namespace=False,
    recursion_limit=10000, additions=True, cell_filename=lambda call: f"<cell-{call}>",
    syntax_error=_our_syntax_error, format_error=_our_error, render=render_our_dialect,
    output_tail=True, stderr_shown=True, reset_after_game_over=True, valid_actions_from_results=False)


# --- the Duck dialect ----------------------------------------------------------------------

DUCK_DIALECT_MODULES = {"bisect", "collections", "copy", "fractions", "functools", "heapq", "itertools",
                        "json", "math", "operator", "random", "re", "statistics", "string"}
DUCK_DIALECT_BUILTINS = (
    "abs all any ascii bin bool bytearray bytes callable chr complex dict dir divmod enumerate "
    "Exception filter float format frozenset getattr hasattr hash hex int isinstance issubclass iter "
    "len list map max min next oct ord pow print range repr reversed round set slice sorted str sum "
    "tuple TypeError type ValueError RuntimeError zip").split()
_DUCK_FILENAME = "<python_tool>"


def _duck_dialect_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                         level: int = 0) -> Any:
    if str(name or "").split(".", 1)[0] not in DUCK_DIALECT_MODULES:
        raise ImportError(f"Module '{name}' is not allowed in the sandbox.")
    return builtins.__import__(name, globals, locals, fromlist, level)


def _duck_dialect_builtins() -> dict[str, Any]:
    return {n: getattr(builtins, n) for n in DUCK_DIALECT_BUILTINS} | {"__import__": _duck_dialect_import}


def _duck_dialect_error(exc: BaseException, filename: str) -> str:
    """The snippet's frames only, without source lines."""
    tb = _stack(exc)
    frames = [f for f in tb if f.filename == filename] or tb[-1:]
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{filename}", line {f.lineno}, in {f.name}' for f in frames]
    lines.append(f"{type(exc).__name__}: {exc}")
    return "\n".join(lines)


DUCK = Dialect(
    name="duck", names=DUCK_DIALECT_NAMES, builtins=_duck_dialect_builtins, fresh_namespace=True,
    recursion_limit=1000, additions=False, cell_filename=lambda call: _DUCK_FILENAME,
    syntax_error=lambda exc: f"Python syntax error: {exc}", format_error=_duck_dialect_error,
    render=render_duck_dialect, output_tail=False, stderr_shown=False, reset_after_game_over=False,
    valid_actions_from_results=True)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (OURS, DUCK)}
