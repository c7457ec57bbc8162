"""`check(step, encode)`: how well the model's simulator predicts what really happened.

Part of the world-model tools (duck.sandbox.tools); runs inside the kernel's worker. Every
recorded transition of the chosen levels (default: the current one) is replayed through the
model's `step(encode(before), action)` and compared with `encode(after)`. RESETs are not
compared (the level restarts); neither are transitions that completed a level (the new
level's board is not a consequence of the rules; the win of the last level is known from the
last action's result) — with `is_goal`, those are where the goal
must hold: `is_goal(step(encode(before), action))` is checked there, and `is_goal` on every
other recorded state, where it must not hold.

A prediction of `None` means "no prediction" (counted, not compared). States are compared
with `numpy.array_equal` for arrays, `==` otherwise. A mismatch is reported small: the cells
that differ (or a crop of predicted / actual letters around them) for grids; the keys,
indices or fields that differ for dicts, sequences and objects. The answer is a `Report`
(a dict) printed as a few lines.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from duck.game.frames import LETTERS

_CLICK = re.compile(r"MOUSE\(row=(-?\d+), col=(-?\d+)\)")


class Report(dict):
    """A tool's answer: a dict (usable as `result`), printed as text."""

    def __str__(self) -> str:
        return self.get("text", "")

    __repr__ = __str__


def as_action(text: str) -> Any:
    """A recorded action display string -> what `action()` takes: 'UP', or a MOUSE dict."""
    m = _CLICK.fullmatch(text)
    return {"action": "MOUSE", "row": int(m.group(1)), "col": int(m.group(2))} if m else text


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. comparing containers of arrays
        return repr(a) == repr(b)


def _cut(x: Any, n: int = 160) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


def describe(pred: Any, actual: Any, before: Any = None, cells: int = 8) -> str:
    """A mismatch in a few lines."""
    if isinstance(pred, np.ndarray) or isinstance(actual, np.ndarray):
        p, a = np.asarray(pred), np.asarray(actual)
        if p.shape != a.shape:
            return f"shape predicted {p.shape}, actual {a.shape}"
        rows, cols = np.nonzero(p != a)
        if len(rows) <= cells:
            return f"{len(rows)} cells differ: " + ", ".join(
                f"({r},{c}) predicted {_letter(p[r, c])} got {_letter(a[r, c])}" for r, c in zip(rows, cols))
        r0, r1, c0, c1 = rows.min(), min(rows.max(), rows.min() + 11), cols.min(), min(cols.max(), cols.min() + 23)
        crop = lambda g: ["".join(_letter(v) for v in row) for row in g[r0:r1 + 1, c0:c1 + 1]]  # noqa: E731
        lines = [f"{len(rows)} cells differ in rows {rows.min()}-{rows.max()}, cols {cols.min()}-{cols.max()}; "
                 f"crop rows {r0}-{r1}, cols {c0}-{c1} (before | predicted | actual):"]
        b = crop(np.asarray(before)) if isinstance(before, np.ndarray) and before.shape == a.shape else None
        for i, (x, y) in enumerate(zip(crop(p), crop(a))):
            lines.append(f"  {b[i] + ' | ' if b else ''}{x} | {y}")
        return "\n".join(lines)
    if isinstance(pred, dict) and isinstance(actual, dict):
        keys = [k for k in {**pred, **actual} if not same(pred.get(k, _MISSING), actual.get(k, _MISSING))]
        return "differs at " + "; ".join(f"[{k!r}] predicted {_cut(pred.get(k, _MISSING), 60)}, actual "
                                         f"{_cut(actual.get(k, _MISSING), 60)}" for k in keys[:6])
    if isinstance(pred, (tuple, list)) and isinstance(actual, (tuple, list)) and len(pred) == len(actual):
        idx = [i for i, (x, y) in enumerate(zip(pred, actual)) if not same(x, y)]
        return "differs at " + "; ".join(f"[{i}] predicted {_cut(pred[i], 60)}, actual {_cut(actual[i], 60)}"
                                         for i in idx[:6])
    if hasattr(pred, "__dict__") and type(pred) is type(actual):
        return describe(vars(pred), vars(actual))
    head = f"before {_cut(before, 100)}; " if before is not None and not isinstance(before, np.ndarray) else ""
    return f"{head}predicted {_cut(pred)}, actual {_cut(actual)}"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _letter(v: Any) -> str:
    try:
        return LETTERS[int(v) % 16]
    except (TypeError, ValueError):
        return "?"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


@dataclass
class _Tally:
    """What the replay of the recorded transitions found."""

    n: int = 0  # compared
    exact: int = 0
    unpredicted: int = 0
    resets: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    level_ups: list[tuple[int, Any]] = field(default_factory=list)
    false_goals: int = 0
    goal_error: str | None = None
    cut: bool = False


def check(transitions: list[Any], current_level: int, step: Callable[[Any, Any], Any],
          encode: Callable[[Any], Any] | None = None, *, level: int | str | None = None,
          is_goal: Callable[[Any], bool] | None = None, show: int = 3, max_seconds: float = 15.0) -> Report:
    t0 = time.perf_counter()
    enc = encode or (lambda f: f.grid)
    want = current_level if level is None else level
    cache: dict[int, Any] = {}

    def state(frame: Any) -> Any:
        k = id(frame)
        if k not in cache:
            cache[k] = (frame, enc(frame))
        return cache[k][1]

    t = _Tally()
    stopped = _compare(transitions, want, step, state, is_goal, t, t0 + max_seconds)
    if stopped is not None:
        return stopped
    scope = f"level {want}" if want != "all" else "all levels"
    notes = []
    if t.unpredicted:
        notes.append(f"step returned None (no prediction) for {t.unpredicted}")
    if t.resets:
        notes.append(f"{t.resets} RESET not compared")
    if t.level_ups:
        notes.append(f"{len(t.level_ups)} level change{'s' if len(t.level_ups) != 1 else ''} not compared")
    if t.cut:
        notes.append(f"stopped after {max_seconds:g}s")
    lines = [f"check: {t.exact} of {t.n} transitions predicted exactly ({scope}"
             + (f"; {'; '.join(notes)}" if notes else "") + ")"]
    for m in t.mismatches[:show]:
        what = m.get("detail") or f"step raised {m['error']}"
        lines.append(f"mismatch at transition {m['transition']} (step {m['step']}) {m['action']}: {what}")
    if len(t.mismatches) > show:
        lines.append(f"... {len(t.mismatches) - show} more mismatches (transitions "
                     f"{', '.join(str(m['transition']) for m in t.mismatches[show:show + 10])}"
                     f"{', ...' if len(t.mismatches) > show + 10 else ''})")
    out: dict[str, Any] = dict(ok=not t.mismatches and t.n > 0, compared=t.n, exact=t.exact,
                               unpredicted=t.unpredicted, mismatches=t.mismatches[:show],
                               mismatch_count=len(t.mismatches))
    if is_goal is not None:
        lines.append(_goals(t, step, state, is_goal, out))
    if t.n == 0:
        lines.append("(nothing to compare yet on this level: play an action, or pass level='all')")
    out["text"] = "\n".join(lines)
    return Report(out)


def _compare(transitions: list[Any], want: int | str, step: Callable[[Any, Any], Any], state: Callable[[Any], Any],
             is_goal: Callable[[Any], bool] | None, t: _Tally, deadline: float) -> Report | None:
    """Replay every recorded transition of the level(s) through `step` into `t`; the answer
    itself when the encoder raised."""
    for i, tr in enumerate(transitions):
        b, a = tr.before_frame, tr.after_frame
        if b is None or (want != "all" and b.level != want):
            continue
        if tr.action == "RESET":
            t.resets += 1
            continue
        if b.level != a.level or (getattr(tr, "result", None) or {}).get("state") == "WIN":
            t.level_ups.append((i, tr))  # the last level's win keeps the level number
            continue
        if time.perf_counter() > deadline:
            t.cut = True
            break
        t.n += 1
        try:
            s0, s1 = state(b), state(a)
        except Exception as e:  # noqa: BLE001 - the model's encoder
            return Report(ok=False, compared=t.n - 1, exact=t.exact, error=f"encode raised: {_err(e)}",
                          text=f"check stopped: encode raised on transition {i} (step {a.step}): {_err(e)}")
        try:
            pred = step(s0, as_action(tr.action))
        except Exception as e:  # noqa: BLE001 - the model's simulator
            t.mismatches.append({"transition": i, "step": a.step, "action": tr.action, "error": _err(e)})
            continue
        if pred is None:
            t.unpredicted += 1
            continue
        if same(pred, s1):
            t.exact += 1
        else:
            t.mismatches.append({"transition": i, "step": a.step, "action": tr.action,
                                 "detail": describe(pred, s1, s0)})
        if is_goal is not None and t.goal_error is None:
            try:
                t.false_goals += bool(is_goal(s1))
            except Exception as e:  # noqa: BLE001
                t.goal_error = _err(e)
    return None


def _goals(t: _Tally, step: Callable[[Any, Any], Any], state: Callable[[Any], Any],
           is_goal: Callable[[Any], bool], out: dict[str, Any]) -> str:
    """Whether `is_goal` holds where a level was completed (predicted) and only there: the
    report's line; its numbers go into `out`."""
    hits, goal_lines = 0, []
    for i, tr in t.level_ups:
        try:
            p = step(state(tr.before_frame), as_action(tr.action))
            hit = p is not None and bool(is_goal(p))
        except Exception as e:  # noqa: BLE001
            goal_lines.append(f"transition {i}: {_err(e)}")
            hit = False
        hits += hit
    out.update(goal_hits=hits, level_ups=len(t.level_ups), false_goals=t.false_goals)
    out["ok"] = out["ok"] and hits == len(t.level_ups) and not t.false_goals
    return (f"goal: is_goal held after {hits} of {len(t.level_ups)} level-completing actions (predicted); "
            f"it also held on {t.false_goals} recorded states that did not complete a level"
            + (f"; is_goal raised {t.goal_error}" if t.goal_error else "")
            + ("; " + "; ".join(goal_lines[:2]) if goal_lines else ""))
