"""The checker of the facts the model is told (DESIGN §6: every fact is true of the boards it
describes): each fact of an action's or a call's text, read back from the text alone and
checked against the boards, with its own reading of the boards (label_regions, counts), not
the matching that wrote it (duck.game.animation).

`check_change(text, before, after, frames, level)`: the parts of a change text (the kernel's
`last_action_result['animation']`, or a turn's "Net change" line), each a list of `Claim`s.
`check_animation_line(line, steps, level_before)`: the turn's "Animation" line. The rule: a
part that is not understood is a false claim of kind `unknown`, so a new kind of fact cannot
slip past. The kinds (`cells`, `moved`, ..., `animation`) and what each is checked against:
docs/workbench.md, "The facts bench".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from duck.game.animation import HUD_BORDER, SPRITE_MAX, inside
from duck.game.change import informative_frames, transient
from duck.game.frames import LETTERS
from duck.game.regions import label_regions

_REGION = r"([A-Za-z])(\d+)px at \((\d+),(\d+)\)"
_MANY = r"(\d+) ([A-Za-z]) regions \((\d+)px\)"
_MOVED = re.compile(r"([A-Za-z])(\d+)px \((\d+),(\d+)\)->\((\d+),(\d+)\)")
_BOX = r"rows? (\d+)(?:-(\d+))?, cols? (\d+)(?:-(\d+))?"
GROUPS = ("resized", "reshaped", "split", "merged", "regrouped")


@dataclass
class Claim:
    kind: str
    text: str
    ok: bool
    why: str = ""


class Boards:
    """Two boards of one shape: their regions, and what changed."""

    def __init__(self, before: np.ndarray, after: np.ndarray, border: int = HUD_BORDER) -> None:
        self.grid = (np.asarray(before), np.asarray(after))
        self.labels = tuple(label_regions(g)[0] for g in self.grid)
        self.changed = self.grid[0] != self.grid[1]
        self.band = ~inside(self.grid[1].shape, border)

    def cells(self, side: int, k: int) -> np.ndarray:
        return self.labels[side] == k

    def find(self, side: int, letter: str, px: int, top: int, left: int) -> list[int]:
        """The regions of that colour and size whose box has that top-left corner."""
        g, lab = self.grid[side], self.labels[side]
        if not (0 <= top < g.shape[0] and 0 <= left < g.shape[1]) or letter not in LETTERS:
            return []
        out = []
        for k in np.unique(lab[top][g[top] == LETTERS.index(letter)]).tolist():
            rows, cols = np.nonzero(lab == k)
            if len(rows) == px and rows.min() == top and cols.min() == left:
                out.append(int(k))
        return out

    def shape(self, side: int, k: int) -> frozenset[tuple[int, int]]:
        rows, cols = np.nonzero(self.cells(side, k))
        return frozenset(zip((rows - rows.min()).tolist(), (cols - cols.min()).tolist()))

    def partners(self, side: int, k: int) -> set[int]:
        """The regions of the other board holding a cell of region k in its colour."""
        m = self.cells(side, k)
        colour = self.grid[side][m][0]
        other = 1 - side
        return set(np.unique(self.labels[other][m & (self.grid[other] == colour)]).tolist())

    def identical_elsewhere(self, side: int, k: int) -> bool:
        """Region k is also a region of the other board, cell for cell."""
        m = self.cells(side, k)
        other = 1 - side
        ks = np.unique(self.labels[other][m])
        return len(ks) == 1 and bool((self.labels[other] == ks[0]).sum() == m.sum()) and bool(
            (self.grid[other][m] == self.grid[side][m][0]).all())


def _regions(text: str) -> list[tuple[str, int, int, int]]:
    return [(m[1], int(m[2]), int(m[3]), int(m[4])) for m in re.finditer(_REGION, text)]


def _moved(b: Boards, item: str) -> Claim:
    m = _MOVED.fullmatch(item)
    if not m:
        return Claim("moved", item, False, "not understood")
    letter, px, r0, c0, r1, c1 = m[1], *map(int, m.groups()[1:])
    for k0 in b.find(0, letter, px, r0, c0):
        for k1 in b.find(1, letter, px, r1, c1):
            if (r0, c0) != (r1, c1) and b.shape(0, k0) == b.shape(1, k1) \
                    and not b.identical_elsewhere(0, k0) and not b.identical_elsewhere(1, k1):
                return Claim("moved", item, True)
    return Claim("moved", item, False, "no region of that shape left the one place and took the other")


def _whole(b: Boards, kind: str, item: str) -> Claim:
    side = 1 if kind == "appeared" else 0
    found = _regions(item)
    if len(found) != 1:
        return Claim(kind, item, False, "not understood")
    letter, px, r, c = found[0]
    for k in b.find(side, letter, px, r, c):
        m = b.cells(side, k)
        if not (b.grid[1 - side][m] == LETTERS.index(letter)).any():
            return Claim(kind, item, True)
    return Claim(kind, item, False, f"no such region, or its colour is still in some of its cells {'before' if side else 'after'}")


def _recoloured(b: Boards, item: str) -> Claim:
    m = re.fullmatch(_REGION + r" -> ([A-Za-z])", item)
    if not m or m[5] not in LETTERS:
        return Claim("recoloured", item, False, "not understood")
    for k in b.find(0, m[1], int(m[2]), int(m[3]), int(m[4])):
        cells = b.cells(0, k)
        ks = np.unique(b.labels[1][cells])
        if len(ks) == 1 and (b.labels[1] == ks[0]).sum() == cells.sum() and (b.grid[1][cells] == LETTERS.index(m[5])).all():
            return Claim("recoloured", item, True)
    return Claim("recoloured", item, False, "those cells are not one region of that colour after")


def _side_ok(b: Boards, side: int, text: str, have: set[int]) -> bool:
    """Whether one side of a group names exactly the regions `have` of that board."""
    many = re.fullmatch(_MANY, text.strip())
    if many:
        n, letter, px = int(many[1]), many[2], int(many[3])
        sizes = [int(b.cells(side, k).sum()) for k in have]
        colours = {LETTERS[int(b.grid[side][b.cells(side, k)][0]) % 16] for k in have}
        return len(have) == n and sum(sizes) == px and colours == {letter}
    named = _regions(text)
    if len(named) != len(text.split(" + ")):
        return False
    ids = []
    for letter, px, r, c in named:
        ks = [k for k in b.find(side, letter, px, r, c) if k in have]
        if not ks:
            return False
        ids.append(ks[0])
    return set(ids) == have and len(ids) == len(have)


def _group(b: Boards, kind: str, item: str) -> Claim:
    if " -> " not in item:
        return Claim(kind, item, False, "not understood")
    left, right = item.split(" -> ", 1)
    named = [(side, k) for side, text in ((0, left), (1, right))
             for letter, px, r, c in _regions(text) for k in b.find(side, letter, px, r, c)]
    if not named:
        return Claim(kind, item, False, "no region named is there")
    start = named[0]
    group, todo = {start}, [start]
    while todo:  # the closed group of same-colour regions sharing cells across the boards
        s, k = todo.pop()
        for k2 in b.partners(s, k):
            if (1 - s, k2) not in group:
                group.add((1 - s, k2))
                todo.append((1 - s, k2))
    old = {k for s, k in group if s == 0}
    new = {k for s, k in group if s == 1}
    if not (_side_ok(b, 0, left, old) and _side_ok(b, 1, right, new)):
        return Claim(kind, item, False, f"the group of regions sharing cells is {len(old)} -> {len(new)}, not as named")
    sizes = ({int(b.cells(0, k).sum()) for k in old}, {int(b.cells(1, k).sum()) for k in new})
    shaped = len(old) == len(new) == 1 and b.shape(0, min(old)) != b.shape(1, min(new))
    fits = {"resized": len(old) == len(new) == 1 and sizes[0] != sizes[1],
            "reshaped": shaped and sizes[0] == sizes[1],
            "split": len(old) == 1 and len(new) > 1, "merged": len(old) > 1 and len(new) == 1,
            "regrouped": len(old) > 1 and len(new) > 1}[kind]
    return Claim(kind, item, fits, "" if fits else f"a {len(old)} -> {len(new)} group is not {kind}")


def _box(text: str, mask: np.ndarray) -> bool:
    """Whether the first box written in `text` bounds the cells of `mask`."""
    m = re.search(_BOX, text)
    if m is None or not mask.any():
        return False
    rows, cols = np.nonzero(mask)
    r0, r1, c0, c1 = int(m[1]), int(m[2] or m[1]), int(m[3]), int(m[4] or m[3])
    return (r0, r1, c0, c1) == (rows.min(), rows.max(), cols.min(), cols.max())


def _items(body: str) -> list[str]:
    body = re.sub(r" \(\+\d+ more\)$", "", body)
    return [x for x in body.split(", ") if x]


def _counts(b: Boards, part: str) -> Claim:
    m = re.fullmatch(r"HUD: (\d+) cells? changed((?:, [A-Za-z] \d+ -> \d+ cells)*)", part)
    if not m:
        return Claim("hud", part, False, "not understood")
    ok = int(m[1]) == int((b.changed & b.band).sum())
    for x, p, q in re.findall(r", ([A-Za-z]) (\d+) -> (\d+) cells", m[2]):
        v = LETTERS.index(x)
        ok &= (int(p), int(q)) == (int((b.grid[0][b.band] == v).sum()), int((b.grid[1][b.band] == v).sum()))
    return Claim("hud", part, ok, "" if ok else "the border's counts differ")


def _large(b: Boards, part: str) -> list[Claim]:
    out = []
    for x in part.split(": ", 1)[1]:
        v, ok = LETTERS.index(x), False
        for side in (0, 1):
            for k in np.unique(b.labels[side][b.grid[side] == v]).tolist():
                if int(b.cells(side, k).sum()) > SPRITE_MAX and not b.identical_elsewhere(side, k):
                    ok = True
        out.append(Claim("large", f"large {x}", ok, "" if ok else "no large region of that colour changed"))
    return out


def check_parts(b: Boards, parts: Sequence[str]) -> list[Claim]:
    """The claims of the object parts of a change text (after the frame count and level-up)."""
    out: list[Claim] = []
    inner = b.changed & ~b.band
    for part in parts:
        if part == "..." or re.fullmatch(r"\+\d+ more", part):  # (the text was cut there, or an old listing's tail)
            continue
        name, _, body = part.partition(": ")
        if m := re.fullmatch(r"(\d+) cells? changed in " + _BOX, part):
            ok = int(m[1]) == int(inner.sum()) and _box(part, inner)
            out.append(Claim("cells", part, ok, "" if ok else "not the count or box of the cells changed away from the border"))
        elif name == "moved":
            out += [_moved(b, x) for x in _items(body)]
        elif name == "recoloured":
            out += [_recoloured(b, x) for x in _items(body)]
        elif name in ("appeared", "vanished"):
            out += [_whole(b, name, x) for x in _items(body)]
        elif name in GROUPS:
            out += [_group(b, name, x) for x in _items(body)]
        elif name.startswith("large regions"):
            out += _large(b, part)
        elif name == "HUD":
            out.append(_counts(b, part))
        elif part.startswith("only the HUD border changed"):
            ok = not inner.any() and b.changed.any()
            out.append(Claim("hud_only", part, ok, "" if ok else "cells changed away from the border"))
        elif m := re.fullmatch(r"board replaced \((\d+) cells changed\)", part):
            ok = int(m[1]) == int(b.changed.sum()) > b.changed.size // 2
            out.append(Claim("replaced", part, ok, "" if ok else "not the count, or not over half the board"))
        elif part in ("board unchanged", "no cell changed"):
            out.append(Claim("unchanged", part, not b.changed.any(), "cells changed"))
        else:
            out.append(Claim("unknown", part, False, "not understood"))
    return out


def check_change(text: str, before: np.ndarray, frames: Sequence[np.ndarray], level: int | None = None,
                 levelled: bool = False, border: int = HUD_BORDER) -> list[Claim]:
    """The claims of a change text about an action (or a call) from `before` to `frames[-1]`,
    `frames` being what it returned (a call: just its final board). `levelled`: the action
    completed level `level` and switched to the next one."""
    parts = [p for p in text.split("; ")]
    out: list[Claim] = []
    after, end = np.asarray(frames[-1]), len(frames) - 1  # the board described, its index
    if m := re.fullmatch(r"(\d+) frames?", parts[0]):
        out.append(Claim("frames", parts[0], int(m[1]) == len(frames), "the action returned another count"))
        parts = parts[1:]
    if parts and (m := re.fullmatch(r"level (\d+) completed: facts up to frame (\d+) of (\d+), the board that "
                                    r"completed it \(frame (\d+) is level (\d+)'s first board\)", parts[0])):
        k, n = int(m[2]), int(m[3])
        ok = levelled and int(m[1]) == level and int(m[5]) == level + 1 and n == len(frames) == int(m[4]) and k == n - 1
        out.append(Claim("level_up", parts[0], ok, "" if ok else "the action did not switch levels there"))
        if 0 < k <= len(frames):
            after, end = np.asarray(frames[k - 1]), k - 1
        parts = parts[1:]
    elif levelled and len(frames) > 1 and parts and parts[0] not in ("...",):
        out.append(Claim("level_up", parts[0], False, "a level-up described against the next level's board"))
    if parts and (m := re.fullmatch(r"the board changed size \((\d+)x(\d+) -> (\d+)x(\d+)\)", parts[0])):
        ok = np.asarray(before).shape != after.shape
        return out + [Claim("size", parts[0], ok, "the board kept its size")]
    if np.asarray(before).shape != after.shape:
        return out + [Claim("size", text, False, "the board changed size and the text does not say so")]
    last = parts[-1] if parts else ""
    mid = re.fullmatch(r"seen only mid-animation: ([A-Za-z]+) in " + _BOX + r" \(frames (\d+)-(\d+) of (\d+)\)", last)
    if mid:
        parts = parts[:-1]
    b = Boards(before, after, border)
    out += check_parts(b, parts)
    if mid:
        out.append(_mid(before, after, frames, end, mid, last))
    return out


def _mid(before: np.ndarray, after: np.ndarray, frames: Sequence[np.ndarray], end: int, m: re.Match,
         text: str) -> Claim:
    """"seen only mid-animation: letters in box (frames i-j of n)": the cells of the frames
    before the board described (`frames[end]`) in a colour neither board has there."""
    i, j = int(m[6]), int(m[7])
    mids = np.asarray([np.asarray(f) for f in frames[:end]])
    if not len(mids) or mids.shape[1:] != np.asarray(before).shape:
        return Claim("mid_animation", text, False, "no mid frames")
    t = (mids != before) & (mids != after)
    hit = np.nonzero(t.any(axis=(1, 2)))[0]
    letters = "".join(sorted({LETTERS[int(v) % 16] for v in np.unique(mids[t])}))
    ok = (len(hit) > 0 and letters == m[1] and _box(text, t.any(axis=0)) and (i, j) == (hit[0] + 1, hit[-1] + 1)
          and int(m[8]) == len(frames))
    return Claim("mid_animation", text, bool(ok), "" if ok else "not the colours, box or frames seen only mid-way")


def check_animation_line(line: str, steps: Sequence[Any], level_before: int, border: int = HUD_BORDER) -> list[Claim]:
    """The turn's animation line: frame counts, the level-up, the in-between frames."""
    out: list[Claim] = []
    n = len(steps)
    lens = [len(s.frames) for s in steps]
    head = re.match(r"(\d+) frames over (\d+) actions?; (\d+) animated \(longest (\d+) frames\)", line)
    if not head:
        return [Claim("animation", line, False, "not understood")]
    ok = (int(head[1]), int(head[2]), int(head[3]), int(head[4])) == (sum(lens), n, sum(k > 1 for k in lens), max(lens))
    out.append(Claim("animation", head[0], ok, "" if ok else "other counts"))
    won, prev = None, level_before
    for s, st in enumerate(steps):
        if st.levels > prev and st.state != "WIN" and won is None:
            won = s
        prev = st.levels
    lv = re.search(r"(?:action (\d+)|the action) completed level (\d+) at frame (\d+) of (\d+) "
                   r"\(frame (\d+) is level (\d+)'s first board\)", line)
    if lv:
        s = int(lv[1]) - 1 if lv[1] else 0
        ok = (s == won and int(lv[4]) == lens[s] == int(lv[5]) and int(lv[3]) == lens[s] - 1
              and int(lv[2]) + 1 == int(lv[6]))
        out.append(Claim("level_up", lv[0], ok, "" if ok else "no level switch there"))
    elif won is not None and lens[won] > 1:
        out.append(Claim("level_up", line, False, "a level-up the line does not name"))
    cut = [st if s != won else type(st)(st.action, st.before, tuple(st.frames[:-1]), st.state, st.levels)
           for s, st in enumerate(steps)]
    for m in re.finditer(r"(?:action (\d+): )?" + _BOX + r", frames (\d+)-(\d+) of (\d+)", line.split("seen only in between: ", 1)[-1]
                         if "seen only in between: " in line else ""):
        s = int(m[1]) - 1 if m[1] else 0
        st = cut[s] if 0 <= s < n else None
        idx = informative_frames(st.before, st.frames, border) if st is not None else []
        t = transient(st.before, st.frames, border) if idx else None
        ok = bool(idx) and (idx[0] + 1, idx[-1] + 1, lens[s]) == (int(m[6]), int(m[7]), int(m[8])) \
            and _box(m[0], t[idx].any(axis=0))
        out.append(Claim("animation", m[0], ok, "" if ok else "those frames do not hold what the board lost there"))
    if re.search(r"no in-between frame shows anything", line):
        ok = not any(informative_frames(st.before, st.frames, border) for st in cut if len(st.frames) > 1)
        out.append(Claim("animation", "no in-between frame", ok, "" if ok else "a mid frame holds what the board lost"))
    return out
