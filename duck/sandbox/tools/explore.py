"""`explore(n)`, worker side: what the explorer's actions taught, in a few lines.

Part of the world-model tools (duck.sandbox.tools). The host plays the actions
(duck.sandbox.handoff: the non-LLM explorer from the current board, each action recorded like
any other and sent back as new history); here they are summarised per action class — a key,
or a click on an object of some colour and size — as how often the class changed the board and
what the changes were, plus how many boards never seen before were reached and whether a
level was completed or the game ended.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from duck.game.frames import LETTERS
from duck.sandbox.tools.check import Report, as_action
from duck.sandbox.tools.changes import KINDS, diff
from duck.sandbox.tools.perceive import Tracker


def action_class(t: Any, tracker: Tracker) -> str:
    """'UP', or 'MOUSE on Y 2x2' (the colour and box of the object under the click)."""
    a = as_action(t.action)
    if not isinstance(a, dict) or t.before_frame is None:
        return str(a)
    r, c = a["row"], a["col"]
    g = t.before_frame.grid
    if not (0 <= r < g.shape[0] and 0 <= c < g.shape[1]):
        return "MOUSE off the board"
    objs = tracker.objects(t.before_frame)
    if not objs:
        return f"MOUSE on {LETTERS[int(g[r, c]) % 16]}"
    o = objs[int(objs[0]._labels[r, c])]
    return f"MOUSE on {o.letter} {o.height}x{o.width}"


def effect(t: Any, tracker: Tracker) -> str:
    """What a transition changed, without ids and places ('' when nothing), so that the same
    effect at different places counts as one: 'moved O10px by [+5,+0]'."""
    d = diff(tracker, t.before_frame, t.after_frame)
    if not d["cells"]:
        return ""
    for key in KINDS:  # the first change only: moves before recolourings before the rest
        if d[key]:
            return f"{key} {d[key][0].kind()}"
    return f"{d['cells']} cells of large regions"


def summarize(new: Sequence[Any], result: dict[str, Any], seen: set[bytes], tracker: Tracker) -> Report:
    """Per action class: tries, board changes and the commonest effects; new boards; levels."""
    classes: dict[str, dict[str, Any]] = {}
    fresh = 0
    for t in new:
        key = t.after_frame.grid.tobytes()
        if key not in seen:
            fresh += 1
            seen.add(key)
        if t.before_frame is None:
            continue
        c = classes.setdefault(action_class(t, tracker), {"tries": 0, "changed": 0, "effects": Counter()})
        c["tries"] += 1
        if t.before_frame.level != t.after_frame.level:
            c["effects"]["completed the level"] += 1
            c["changed"] += 1
        elif not np.array_equal(t.before_frame.grid, t.after_frame.grid):
            c["changed"] += 1
            c["effects"][effect(t, tracker)] += 1
    done = result.get("executed_count", len(new))
    lines = [f"explored {done} action{'s' if done != 1 else ''} (stop: {result.get('stop_reason', '?')}); "
             f"{sum(c['changed'] for c in classes.values())} changed the board; {fresh} new boards; "
             f"now level {result.get('level')}, state {result.get('state')}"]
    if result.get("error"):
        lines.append(f"error: {result['error']}")
    per = {}
    for name, c in sorted(classes.items(), key=lambda kv: -kv[1]["tries"]):
        top = "; ".join(f"{e} x{k}" if k > 1 else e for e, k in c["effects"].most_common(3))
        lines.append(f"  {name}: {c['tries']} tried, {c['changed']} changed the board" + (f" ({top})" if top else ""))
        per[name] = {"tries": c["tries"], "changed": c["changed"], "effects": dict(c["effects"])}
    return Report(actions=list(result.get("executed_actions") or []), classes=per, new_boards=fresh,
                  level=result.get("level"), state=result.get("state"),
                  level_completed=bool(result.get("level_completed")), game_over=bool(result.get("game_over")),
                  stop=result.get("stop_reason"), text="\n".join(lines))
