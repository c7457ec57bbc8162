"""World-model tools for model code: observe, simulate, check, plan, explore (issue 16).

A 27B model cannot hold a game's rules in its head, but it can write them as a small Python
simulator; these tools make that cheap. They live in the kernel's worker process (numpy, the
standard library and duck.game.frames only) and are put into the model's namespace by
`Tools.publish`, called from `Worker.publish` when the kernel was started with them
(`Kernel(..., tools=True)`, switched by `agent.world_model_tools`; prompts/system.j2 documents
them for the model, one example each):

* `objects(frame)`, `diff(a, b)`, `controlled()`: perception with stable object ids
  (duck.sandbox.tools.perceive; what changed: .changes);
* `check(step, encode)`: the simulator replayed over every recorded transition (.check);
* `plan(step, start, is_goal)`: shortest action list in the simulator (.search);
* `explore(n)`: n real actions handed to the non-LLM explorer, summarised (.explore; the host
  side is duck.sandbox.handoff).

`check` and `plan` keep the source of the functions they are given in `notes['simulator']`,
and a new worker (after a restart) defines them again from it (.keep). The names are set again
before every call, like `current_frame`.
"""

from __future__ import annotations

from typing import Any, Callable

from duck.sandbox.tools import keep
from duck.sandbox.tools.check import Report, check as run_check
from duck.sandbox.tools.explore import summarize
from duck.sandbox.tools.changes import diff as frame_diff
from duck.sandbox.tools.perceive import Tracker, controlled as find_controlled
from duck.sandbox.tools.search import DEFAULT_KEYS, plan as run_plan

NAMES = ("objects", "diff", "controlled", "check", "plan", "explore")
MAX_EXPLORE = 100  # actions per explore() call


class Tools:
    """The tools of one worker process, bound to its game variables."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.tracker = Tracker(lambda: worker.entries)
        self.seen: set[bytes] | None = None  # every board of the history (explore's "new boards")
        self.restored = False
        self.functions = self._functions()

    def publish(self, ns: dict[str, Any]) -> None:
        if not self.restored:  # a new worker: a simulator kept before a restart comes back
            self.restored = True
            keep.restore(ns)
        ns.update(self.functions)

    def _keep(self, *functions: Any) -> str:
        ns = self.worker.cur_ns
        published = set(NAMES) | {"current_frame", "previous_frame", "history", "transitions", "last_transition",
                                  "last_animation", "last_action_result", "valid_actions", "notes", "action",
                                  "latest_frame", "last_action_frame", "last_action", "result"}
        return keep.keep(ns, [f for f in functions if callable(f)], published, int(self.worker.cfg.get("notes_chars", 8000)))

    def _current(self) -> Any:
        return self.worker.entries[-1].frame if self.worker.entries else None

    def _functions(self) -> dict[str, Callable[..., Any]]:
        tools = self

        def objects(frame: Any = None) -> list[Any]:
            """Objects (4-connected one-colour regions) of a frame (default: current_frame), with ids
            that stay the same across frames: .id .color .letter .size .top .left .bottom .right
            .height .width .center .cells()"""
            return tools.tracker.objects(frame if frame is not None else tools._current())

        def diff(a: Any = None, b: Any = None) -> Any:
            """What changed from a to b (frames or grids; default: previous_frame to current_frame):
            moved (with the shift), recoloured, reshaped, appeared, vanished, cells changed."""
            if a is None and b is None:
                last = tools.worker.transitions[-1] if tools.worker.transitions else None
                if last is None or last.before_frame is None:
                    return "no action yet"
                a, b = last.before_frame, last.after_frame
            return frame_diff(tools.tracker, a, b)

        def controlled(min_share: float = 0.5) -> list[dict[str, Any]]:
            """The objects the keyboard moves, learnt from the transitions so far: [{'object',
            'moves': {key: (drow, dcol)}, 'moved'}], most often moved first."""
            return find_controlled(tools.tracker, tools._current(), min_share)

        def check(step: Callable[[Any, Any], Any], encode: Callable[[Any], Any] | None = None,
                  level: Any = None, is_goal: Callable[[Any], bool] | None = None, show: int = 3) -> Report:
            """Run step(encode(before), action) over every recorded transition of this level
            (level='all': of every level) and compare with encode(after); see the system prompt."""
            cur = tools._current()
            rep = run_check(tools.worker.transitions, cur.level if cur is not None else 1, step, encode,
                            level=level, is_goal=is_goal, show=show)
            kept = tools._keep(step, encode, is_goal)
            if kept:
                rep["kept"] = kept
                rep["text"] += f"\n({kept})"
            return rep

        def plan(step: Callable[[Any, Any], Any], start: Any, is_goal: Callable[[Any], bool], actions: Any = None,
                 max_states: int = 200_000, max_seconds: float = 10.0, heuristic: Any = None, key: Any = None) -> Any:
            """Shortest action list from start to a state where is_goal holds, searched in your
            simulator: {'found', 'actions', 'reason', 'length', 'states', 'expanded', 'seconds'}."""
            keys = [a for a in tools.worker.valid if a in DEFAULT_KEYS]
            res = run_plan(step, start, is_goal, actions, max_states=int(max_states),
                           max_seconds=min(float(max_seconds), 25.0), heuristic=heuristic, key=key,
                           default_actions=keys)
            kept = tools._keep(step, is_goal, heuristic, actions if callable(actions) else None, key)
            if kept:
                res["kept"] = kept
            return res

        def explore(n: int = 10) -> Report:
            """Hand up to n real actions (they count) to a blind explorer from the current board;
            returns what they taught per action: how often it changed the board and how."""
            n = int(n)
            if not 1 <= n <= MAX_EXPLORE:
                raise ValueError(f"explore(n) takes 1 to {MAX_EXPLORE} actions, not {n}")
            if tools.seen is None:
                tools.seen = {e.frame.grid.tobytes() for e in tools.worker.entries}
            start = len(tools.worker.transitions)
            result = tools.worker.request({"op": "explore", "n": n})
            if not result.get("executed") and result.get("error"):
                raise RuntimeError(result["error"])
            return summarize(tools.worker.transitions[start:], result, tools.seen, tools.tracker)

        return {"objects": objects, "diff": diff, "controlled": controlled, "check": check, "plan": plan,
                "explore": explore}
