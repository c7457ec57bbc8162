"""`plan(step, start, is_goal, ...)`: the shortest action list in the model's own simulator.

Part of the world-model tools (duck.sandbox.tools); pure Python, runs inside the kernel's worker.
Breadth-first search (with `heuristic`, A*: best-first on actions so far + the estimate) over
the states `step(state, action)` produces, within a budget of states and seconds that fits in
one kernel call. A `None` from `step` means "this action is impossible there"; an exception
is counted and reported (the first one with its action), and the search goes on without that
edge, so one unmodelled action does not sink a plan. States must be hashable, or numpy arrays
(keyed by their bytes; made read-only, so a step that edits its input in place fails loudly
instead of corrupting the search), or nested lists/dicts/sets (frozen for the key).

The answer is a `Plan` (a dict): `found`, `actions` (the list to give `action(...)`, or None),
`reason`, `length`, `states`, `expanded`, `seconds`, and `errors`/`first_error` when step raised.
`python -m duck.bench plan` measures its speed on a fixed abstraction.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from typing import Any, Callable, Iterable

import numpy as np

DEFAULT_KEYS = ("UP", "DOWN", "LEFT", "RIGHT", "SPACE")


class Plan(dict):
    """The result of `plan`; printed on one or two lines."""

    def __str__(self) -> str:
        head = (f"found {self['length']} actions" if self["found"] else "not found") + f" ({self['reason']}); " \
               f"{self['states']} states, {self['expanded']} expanded, {self['seconds']:.2f}s"
        if self.get("errors"):
            head += f"; step raised {self['errors']} times, first: {self['first_error']}"
        if self["found"]:
            acts = self["actions"]
            shown = ", ".join(_short(a) for a in acts[:40]) + (f", ... ({len(acts)} in all)" if len(acts) > 40 else "")
            head += f"\nactions: [{shown}]"
        return head

    __repr__ = __str__


def _short(a: Any) -> str:
    if isinstance(a, dict) and "row" in a:
        return f"{a.get('action', 'MOUSE')}({a['row']},{a['col']})"
    return str(a)


def freeze(x: Any) -> Any:
    """A hashable stand-in for lists, dicts, sets and numpy arrays (nested)."""
    if isinstance(x, np.ndarray):
        return (x.shape, str(x.dtype), x.tobytes())
    if isinstance(x, dict):
        return tuple(sorted((k, freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return frozenset(freeze(v) for v in x)
    return x


def key_function(start: Any) -> Callable[[Any], Any] | None:
    """How states are keyed, chosen once from the start state (None: the state itself)."""
    if isinstance(start, np.ndarray):
        return lambda s: s.tobytes()
    try:
        hash(start)
    except TypeError:
        return freeze
    return None


def plan(step: Callable[[Any, Any], Any], start: Any, is_goal: Callable[[Any], bool],
         actions: Iterable[Any] | Callable[[Any], Iterable[Any]] | None = None, *, max_states: int = 200_000,
         max_seconds: float = 10.0, heuristic: Callable[[Any], float] | None = None,
         key: Callable[[Any], Any] | None = None, default_actions: Iterable[Any] = DEFAULT_KEYS) -> Plan:
    t0 = time.perf_counter()
    per_state = actions if callable(actions) else None
    fixed = list(default_actions if actions is None else ([] if per_state else actions))
    k = key if key is not None else key_function(start)
    arrays = isinstance(start, np.ndarray)
    if arrays:
        start = _frozen(start)
    errors = [0, ""]
    out = dict(found=False, actions=None, length=None, states=1, expanded=0, errors=0)

    def done(reason: str, path: list[Any] | None = None, states: int = 1, expanded: int = 0) -> Plan:
        out.update(reason=reason, states=states, expanded=expanded, seconds=round(time.perf_counter() - t0, 4),
                   errors=errors[0])
        if errors[0]:
            out["first_error"] = errors[1]
        if path is not None:
            out.update(found=True, actions=path, length=len(path))
        return Plan(out)

    try:
        if is_goal(start):
            return done("the start is a goal", [])
    except Exception as e:  # noqa: BLE001 - the model's code
        return done(f"is_goal raised on the start state: {type(e).__name__}: {e}")
    k0 = start if k is None else k(start)
    parent: dict[Any, tuple[Any, Any] | None] = {k0: None}
    deadline = t0 + max_seconds
    expanded = 0

    def path_to(kn: Any) -> list[Any]:
        acts = []
        while parent[kn] is not None:
            kn, a = parent[kn]
            acts.append(a)
        return acts[::-1]

    def successors(s: Any) -> Iterable[Any]:
        return fixed if per_state is None else per_state(s)

    if heuristic is None:
        frontier: Any = deque([(start, k0)])
        pop = frontier.popleft
    else:
        frontier = [(0.0, 0, 0, start, k0)]
        g_of = {k0: 0}
        counter = 1
    while frontier:
        if heuristic is None:
            s, ks = pop()
        else:
            _, _, g, s, ks = heapq.heappop(frontier)
            if g > g_of.get(ks, g):
                continue
            if ks != k0 and _goal(is_goal, s, errors):  # best-first: a goal counts when popped
                return done("goal reached", path_to(ks), len(parent), expanded)
        expanded += 1
        if not expanded & 63 and time.perf_counter() > deadline:
            return done(f"time budget of {max_seconds:g}s spent", states=len(parent), expanded=expanded)
        try:
            acts = successors(s)
        except Exception as e:  # noqa: BLE001
            _error(errors, e, "actions(state)")
            continue
        for a in acts:
            try:
                n = step(s, a)
            except Exception as e:  # noqa: BLE001 - the model's simulator: count, report, go on
                _error(errors, e, a)
                continue
            if n is None:
                continue
            if arrays:
                n = _frozen(n)
            kn = n if k is None else k(n)
            if heuristic is None:
                if kn in parent:
                    continue
                parent[kn] = (ks, a)
            else:
                if g + 1 >= g_of.get(kn, 1 << 60):
                    continue
                g_of[kn] = g + 1
                parent[kn] = (ks, a)
            if heuristic is None and _goal(is_goal, n, errors):  # breadth-first: the first goal is nearest
                return done("goal reached", path_to(kn), len(parent), expanded)
            if len(parent) >= max_states:
                return done(f"state budget of {max_states} spent", states=len(parent), expanded=expanded)
            if heuristic is None:
                frontier.append((n, kn))
            else:
                try:
                    h = float(heuristic(n))
                except Exception as e:  # noqa: BLE001
                    _error(errors, e, "heuristic")
                    h = 0.0
                heapq.heappush(frontier, (g + 1 + h, counter, g + 1, n, kn))
                counter += 1
    if errors[0] and len(parent) == 1:
        return done("the simulator raised on every action from the start", states=1, expanded=expanded)
    return done(f"no goal reachable: all {len(parent)} states explored", states=len(parent), expanded=expanded)


def _goal(is_goal: Callable[[Any], bool], s: Any, errors: list[Any]) -> bool:
    try:
        return bool(is_goal(s))
    except Exception as e:  # noqa: BLE001 - the model's code
        _error(errors, e, "is_goal")
        return False


def _frozen(a: Any) -> Any:
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _error(errors: list[Any], e: BaseException, where: Any) -> None:
    errors[0] += 1
    if errors[0] == 1:
        errors[1] = f"{type(e).__name__}: {e} (at {_short(where)})"
