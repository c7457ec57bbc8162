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
`duck bench plan` measures its speed on a fixed abstraction.
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
    search = _Search(step, is_goal, actions, default_actions, heuristic, key if key is not None else key_function(start),
                     max_states, max_seconds)
    return search.run(start)


class _Search:
    """One `plan` call: breadth-first (the first goal reached is the nearest), or best-first on
    actions so far + `heuristic` (a goal counts when it is popped)."""

    def __init__(self, step: Callable[[Any, Any], Any], is_goal: Callable[[Any], bool], actions: Any,
                 default_actions: Iterable[Any], heuristic: Callable[[Any], float] | None,
                 key: Callable[[Any], Any] | None, max_states: int, max_seconds: float) -> None:
        self.t0 = time.perf_counter()
        self.step, self.is_goal, self.heuristic, self.key = step, is_goal, heuristic, key
        self.per_state = actions if callable(actions) else None
        self.fixed = list(default_actions if actions is None else ([] if self.per_state else actions))
        self.max_states, self.max_seconds = max_states, max_seconds
        self.errors: list[Any] = [0, ""]
        self.parent: dict[Any, tuple[Any, Any] | None] = {}
        self.expanded = 0
        self.arrays = False

    def run(self, start: Any) -> Plan:
        self.arrays = isinstance(start, np.ndarray)
        if self.arrays:
            start = _frozen(start)
        try:
            if self.is_goal(start):
                return self.done("the start is a goal", [])
        except Exception as e:  # noqa: BLE001 - the model's code
            return self.done(f"is_goal raised on the start state: {type(e).__name__}: {e}")
        k0 = start if self.key is None else self.key(start)
        self.parent = {k0: None}
        self.deadline = self.t0 + self.max_seconds
        out = self._breadth_first(start, k0) if self.heuristic is None else self._best_first(start, k0)
        if out is not None:
            return out
        if self.errors[0] and len(self.parent) == 1:
            return self.done("the simulator raised on every action from the start")
        return self.done(f"no goal reachable: all {len(self.parent)} states explored", states=len(self.parent))

    def done(self, reason: str, path: list[Any] | None = None, states: int = 1) -> Plan:
        out = dict(found=path is not None, actions=path, length=None if path is None else len(path), states=states,
                   expanded=self.expanded, errors=self.errors[0], reason=reason,
                   seconds=round(time.perf_counter() - self.t0, 4))
        if self.errors[0]:
            out["first_error"] = self.errors[1]
        return Plan(out)

    def _path(self, kn: Any) -> list[Any]:
        acts = []
        while self.parent[kn] is not None:
            kn, a = self.parent[kn]
            acts.append(a)
        return acts[::-1]

    def _tick(self) -> Plan | None:
        """One more state expanded; the end of the search when its time is spent."""
        self.expanded += 1
        if not self.expanded & 63 and time.perf_counter() > self.deadline:
            return self.done(f"time budget of {self.max_seconds:g}s spent", states=len(self.parent))
        return None

    def _next(self, s: Any) -> Iterable[tuple[Any, Any, Any]]:
        """(action, state, key) of each state the simulator reaches from `s`; its errors are
        counted and reported, and the search goes on without that edge."""
        try:
            acts = self.fixed if self.per_state is None else self.per_state(s)
        except Exception as e:  # noqa: BLE001
            _error(self.errors, e, "actions(state)")
            return
        for a in acts:
            try:
                n = self.step(s, a)
            except Exception as e:  # noqa: BLE001 - the model's simulator: count, report, go on
                _error(self.errors, e, a)
                continue
            if n is not None:
                n = _frozen(n) if self.arrays else n
                yield a, n, (n if self.key is None else self.key(n))

    def _full(self) -> Plan | None:
        if len(self.parent) >= self.max_states:
            return self.done(f"state budget of {self.max_states} spent", states=len(self.parent))
        return None

    def _breadth_first(self, start: Any, k0: Any) -> Plan | None:
        frontier = deque([(start, k0)])
        while frontier:
            s, ks = frontier.popleft()
            if out := self._tick():
                return out
            for a, n, kn in self._next(s):
                if kn in self.parent:
                    continue
                self.parent[kn] = (ks, a)
                if _goal(self.is_goal, n, self.errors):
                    return self.done("goal reached", self._path(kn), len(self.parent))
                if out := self._full():
                    return out
                frontier.append((n, kn))
        return None

    def _best_first(self, start: Any, k0: Any) -> Plan | None:
        frontier: list[Any] = [(0.0, 0, 0, start, k0)]
        g_of, counter = {k0: 0}, 1
        while frontier:
            _, _, g, s, ks = heapq.heappop(frontier)
            if g > g_of.get(ks, g):
                continue
            if ks != k0 and _goal(self.is_goal, s, self.errors):
                return self.done("goal reached", self._path(ks), len(self.parent))
            if out := self._tick():
                return out
            for a, n, kn in self._next(s):
                if g + 1 >= g_of.get(kn, 1 << 60):
                    continue
                g_of[kn], self.parent[kn] = g + 1, (ks, a)
                if out := self._full():
                    return out
                try:
                    h = float(self.heuristic(n))
                except Exception as e:  # noqa: BLE001
                    _error(self.errors, e, "heuristic")
                    h = 0.0
                heapq.heappush(frontier, (g + 1 + h, counter, g + 1, n, kn))
                counter += 1
        return None


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
