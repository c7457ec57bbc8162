"""`diff(a, b)` for model code: what changed between two boards, in objects with stable ids.

Part of the world-model tools (duck.sandbox.tools); runs inside the kernel's worker. The objects
and their ids are duck.sandbox.tools.perceive's: an object that keeps its id and moved, changed
colour or changed shape is reported as such, with the shift; the others appeared or vanished.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from duck.game.frames import Frame
from duck.sandbox.tools.perceive import SPRITE_MAX, Obj, Tracker, extract, match


class Change(dict):
    """One object's change in a Diff: a dict (id, letter, color, size, at, and what changed),
    printed as a few words."""

    def __str__(self) -> str:
        body = f"#{self['id']} {self['letter']}{self['size']}px"
        at = "({},{})".format(*self["at"])
        if "shift" in self:
            return f"{body} ({self['from'][0]},{self['from'][1]})->{at} [{self['shift'][0]:+d},{self['shift'][1]:+d}]"
        if "from_letter" in self:
            return f"#{self['id']} {self['size']}px at {at} {self['from_letter']}->{self['letter']}"
        if "from_size" in self:
            return f"#{self['id']} {self['letter']} {self['from_size']}px->{self['size']}px at {at}"
        return f"{body} at {at}"

    __repr__ = __str__

    def kind(self) -> str:
        """The change without ids and places, so that the same effect elsewhere reads the same."""
        if "shift" in self:
            return f"{self['letter']}{self['size']}px by [{self['shift'][0]:+d},{self['shift'][1]:+d}]"
        if "from_letter" in self:
            return f"{self['size']}px {self['from_letter']}->{self['letter']}"
        if "from_size" in self:
            return f"{self['letter']} {self['from_size']}px->{self['size']}px"
        return f"{self['letter']}{self['size']}px"


KINDS = ("moved", "recoloured", "reshaped", "appeared", "vanished")


class Diff(dict):
    """What changed between two boards; a dict (lists of Change per kind), printed as lines."""

    def __str__(self) -> str:
        if not self["cells"]:
            return "no change"
        parts = [f"{self['cells']} cells changed in rows {self['rows'][0]}-{self['rows'][1]}, "
                 f"cols {self['cols'][0]}-{self['cols'][1]}"]
        for key in KINDS:
            items = self[key]
            if items:
                more = f" (+{len(items) - 6} more)" if len(items) > 6 else ""
                parts.append(f"{key}: " + "; ".join(str(x) for x in items[:6]) + more)
        if self["scenery"]:
            parts.append("large regions changed: " + "".join(sorted(set(self["scenery"]))))
        return "\n".join(parts)

    __repr__ = __str__


def _grid(x: Any) -> np.ndarray:
    return x.grid if isinstance(x, Frame) else np.asarray(x)


def _empty(cells: int = 0) -> Diff:
    return Diff(cells=cells, rows=(0, 0), cols=(0, 0), scenery=[], **{k: [] for k in KINDS})


def _touched(objs: list[Obj], mask: np.ndarray) -> set[int]:
    return set(np.unique(objs[0]._labels[mask]).tolist()) if objs else set()


def _cover(objs: list[Obj], ids: set[int]) -> np.ndarray:
    """The cells of the small objects among `ids` (big ones would pull in the whole board)."""
    small = [k for k in ids if objs[k].size <= SPRITE_MAX]
    return np.isin(objs[0]._labels, small) if small else np.zeros(objs[0]._labels.shape, bool)


def diff(tracker: Tracker, a: Any, b: Any) -> Diff:
    """Moved (with the shift), recoloured, reshaped, appeared and vanished objects between a and b
    (frames or grids), among the objects that touch a changed cell (and, for a piece that grew
    or shrank, the objects on the other board that overlap it)."""
    ga, gb = _grid(a), _grid(b)
    if ga.shape != gb.shape:
        return _empty(int(max(ga.size, gb.size)))
    changed = ga != gb
    if not changed.any():
        return _empty()
    rows, cols = np.nonzero(changed)
    before = tracker.objects(a)
    after = _link_for_diff(tracker, a, b, before)
    ta, tb = _touched(before, changed), _touched(after, changed)
    ta, tb = ta | _touched(before, _cover(after, tb)), tb | _touched(after, _cover(before, ta))
    bs, as_ = [before[k] for k in sorted(ta)], [after[k] for k in sorted(tb)]
    found = match(bs, as_)
    out = _empty(int(changed.sum()))
    out.update(rows=(int(rows.min()), int(rows.max())), cols=(int(cols.min()), int(cols.max())))
    used = set()
    for i, o in enumerate(as_):
        c = Change(id=o.id, letter=o.letter, color=o.color, size=o.size, at=(o.top, o.left))
        if i not in found:
            _add(out, "appeared", o, c)
            continue
        p, how = found[i]
        used.add(id(p))
        c["id"] = p.id
        if how == "moved":
            _add(out, "moved", o, Change(c, **{"from": (p.top, p.left)}, shift=(o.top - p.top, o.left - p.left)))
        elif how == "recoloured":
            _add(out, "recoloured", o, Change(c, from_letter=p.letter, from_color=p.color))
        elif how == "reshaped" and (p.size, p.top, p.left, p.bottom, p.right) != (o.size, o.top, o.left, o.bottom,
                                                                                 o.right):
            _add(out, "reshaped", o, Change(c, from_size=p.size))
    for p in bs:
        if id(p) not in used:
            _add(out, "vanished", p, Change(id=p.id, letter=p.letter, color=p.color, size=p.size, at=(p.top, p.left)))
    return out


def _add(out: Diff, key: str, o: Obj, change: Change) -> None:
    if o.size > SPRITE_MAX:
        out["scenery"].append(o.letter)
    else:
        out[key].append(change)


def _link_for_diff(tracker: Tracker, a: Any, b: Any, before: list[Obj]) -> list[Obj]:
    """b's objects with ids: tracked ones when b is a history frame, else matched against a."""
    if isinstance(b, Frame) and tracker._index_of(b) is not None:
        return tracker.objects(b)
    objs = extract(_grid(b))
    found = match(before, objs)
    for i, o in enumerate(objs):
        o.id = found[i][0].id if i in found else -1
    return objs
