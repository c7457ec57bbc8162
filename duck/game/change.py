"""What a call's actions did to the board, as facts: the net change of the whole call, and
which animation frames hold what the final board lost.

The model sees one turn per acting call, and a call may play a batch of 30 actions, so the turn
reports the call's net change (`net_change`: from the board before its first action to the board
after its last), never its last transition alone. `Step` is one executed action as the host saw
it (duck.sandbox.actions.CallActions.steps). The HUD border is the `border` outermost rows and
columns (4 in the field's harness, FIELD §3): move counters, timers and life bars change there
on every action, so a change only there is not a change of the puzzle.

A mid frame f_i of an action from board `b` to `a` *holds what the final frame lost* when it has
a transient cell (away from the border, in a colour neither `b` nor `a` has there) AND differs
from `b` in more cells than `a` does: the first alone takes every in-between position of a slide
(bp35: 143 of 154 recorded actions), the second is the field's rule (FIELD §3). `pick_frames`
chooses up to K of a call's; a level-up is measured up to the board that completed the level.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from duck.game.animation import HUD_BORDER, bbox_text, change_parts, inside


@dataclass(frozen=True)
class Step:
    """One executed action: `frames[-1]` is the board after it."""

    action: str  # the display string (duck.game.actions.display)
    before: np.ndarray
    frames: tuple[np.ndarray, ...]
    state: str = "NOT_FINISHED"
    levels: int = 0  # levels completed after the action

    @property
    def after(self) -> np.ndarray:
        return self.frames[-1]


def changed_inside(before: np.ndarray, after: np.ndarray, border: int = HUD_BORDER) -> bool:
    """Whether anything changed away from the HUD border."""
    b, a = np.asarray(before), np.asarray(after)
    if b.shape != a.shape:
        return True
    return bool(((b != a) & inside(a.shape, border)).any())


@dataclass(frozen=True)
class NetChange:
    """The net change from one board to another, as facts."""

    cells: int  # cells that differ
    inside: int  # of those, cells away from the HUD border
    text: str  # one line: "45 cells changed in rows 10-30, cols 5-40; moved: ..."

    @property
    def hud_only(self) -> bool:
        return self.cells > 0 and self.inside == 0


def net_change(before: np.ndarray, after: np.ndarray, border: int = HUD_BORDER) -> NetChange:
    b, a = np.asarray(before), np.asarray(after)
    if b.shape != a.shape:
        return NetChange(a.size, a.size, f"the board changed size ({b.shape[0]}x{b.shape[1]} -> "
                                         f"{a.shape[0]}x{a.shape[1]})")
    diff = b != a
    cells, inner = int(diff.sum()), int((diff & inside(a.shape, border)).sum())
    if cells == 0:
        return NetChange(0, 0, "no cell changed")
    parts = change_parts(b, a, border)
    if inner == 0:
        parts.append(f"only the HUD border changed (the outer {border} rows and columns)")
    return NetChange(cells, inner, "; ".join(parts))


def completed_at(steps: Sequence[Step], level_before: int) -> int | None:
    """The index of the call's action that completed a level and switched to the next one (not
    the win: a won game's last board is the winning one), or None. The host plays no action
    after it in the same call (duck.sandbox.actions, `previous_level_completed`)."""
    prev = level_before
    for s, st in enumerate(steps):
        if st.levels > prev and st.state != "WIN":
            return s
        prev = st.levels
    return None


def up_to_win(step: Step) -> Step:
    """The action that completed a level as it played on that level: its frames up to the last
    one before the switch, the board that completed the level (DESIGN §1b: a level-up returns
    the transition ending on the next level's first frame; the switch is the last frame:
    duck.game.animation.won_frame). One frame: no such board."""
    return replace(step, frames=step.frames[:-1]) if len(step.frames) > 1 else step


def transient(before: np.ndarray, frames: Sequence[np.ndarray], border: int = HUD_BORDER) -> np.ndarray:
    """(n-1, h, w) bool: the transient cells of each mid frame (see the module docstring)."""
    if len(frames) < 2:
        return np.zeros((0,) + np.asarray(frames[-1] if len(frames) else before).shape, dtype=bool)
    b, a = np.asarray(before), np.asarray(frames[-1])
    mids = np.asarray([np.asarray(f) for f in frames[:-1]])
    if mids.shape[1:] != b.shape or b.shape != a.shape:
        return np.zeros((len(frames) - 1,) + a.shape, dtype=bool)
    return (mids != b) & (mids != a) & inside(a.shape, border)


def informative_frames(before: np.ndarray, frames: Sequence[np.ndarray], border: int = HUD_BORDER) -> list[int]:
    """Indexes (0-based, into `frames`) of the mid frames that hold information the final
    frame lost (the module docstring's definition)."""
    t = transient(before, frames, border)
    if not t.any():
        return []
    b, a = np.asarray(before), np.asarray(frames[-1])
    mask = inside(a.shape, border)
    final = int(((a != b) & mask).sum())
    return [i for i in range(len(t)) if t[i].any() and int(((np.asarray(frames[i]) != b) & mask).sum()) > final]


@dataclass(frozen=True)
class Pick:
    """One mid-animation frame chosen to be shown."""

    step: int  # 0-based index of the action in the call
    frame: int  # 0-based index into that action's frames
    of: int  # that action's frame count
    grid: np.ndarray


def as_played(steps: Sequence[Step], level_before: int | None) -> list[Step]:
    """The call's steps with the one that completed a level ending on the board that completed it."""
    won = completed_at(steps, level_before) if level_before is not None else None
    return [up_to_win(st) if s == won else st for s, st in enumerate(steps)]


def pick_frames(steps: Sequence[Step], k: int, border: int = HUD_BORDER, level_before: int | None = None) -> list[Pick]:
    """Up to `k` informative mid frames of a call: greedily the one showing the most transient
    cells in a colour no frame already chosen of the same action shows there, then in play
    order. A frame that shows nothing new is never chosen. With `level_before` (the levels
    completed before the call), the action that completed a level is seen up to the board
    that completed it and its frames go first (the turn that asks for the level's rule)."""
    if k <= 0:
        return []
    played = as_played(steps, level_before)
    won = completed_at(steps, level_before) if level_before is not None else None
    cands: list[tuple[int, int, np.ndarray, np.ndarray]] = []  # step, frame, transient mask, grid
    for s, st in enumerate(played):
        idx = informative_frames(st.before, st.frames, border)
        if idx:
            t = transient(st.before, st.frames, border)
            cands += [(s, i, t[i], np.asarray(st.frames[i])) for i in idx]
    chosen: list[int] = []
    shown: dict[int, list[np.ndarray]] = {}  # per step: the frames already chosen
    for group in ([j for j, c in enumerate(cands) if c[0] == won], list(range(len(cands)))):
        while len(chosen) < k:
            best, gain = -1, 0
            for j in group:
                if j in chosen:
                    continue
                s, _, t, g = cands[j]
                new = t.copy()
                for other in shown.get(s, []):
                    new &= other != g
                if int(new.sum()) > gain:
                    best, gain = j, int(new.sum())
            if best < 0:
                break
            chosen.append(best)
            shown.setdefault(cands[best][0], []).append(cands[best][3])
    return [Pick(cands[j][0], cands[j][1], len(steps[cands[j][0]].frames), cands[j][3]) for j in sorted(chosen)]


def animation_line(steps: Sequence[Step], border: int = HUD_BORDER, level_before: int | None = None) -> str | None:
    """One line of facts about the call's animations: frames, which action completed a level
    at which frame (with `level_before`), and what appeared only in between (None when no
    action returned more than one frame)."""
    animated = [(s, st) for s, st in enumerate(steps) if len(st.frames) > 1]
    if not animated:
        return None
    frames = sum(len(st.frames) for st in steps)
    longest = max(len(st.frames) for _, st in animated)
    n = len(steps)
    head = (f"{frames} frames over {n} action{'s' if n != 1 else ''}; {len(animated)} animated "
            f"(longest {longest} frames)")
    won = completed_at(steps, level_before) if level_before is not None else None
    if won is not None and len(steps[won].frames) > 1:
        m, level = len(steps[won].frames), (steps[won - 1].levels if won else level_before) + 1
        head += (f"; {f'action {won + 1}' if n > 1 else 'the action'} completed level {level} at frame {m - 1} "
                 f"of {m} (frame {m} is level {level + 1}'s first board)")
    played = as_played(steps, level_before)
    seen = []
    for s, _ in animated:
        st = played[s]
        idx = informative_frames(st.before, st.frames, border)
        if not idx:
            continue
        t = transient(st.before, st.frames, border)
        rows, cols = np.nonzero(t[idx].any(axis=0))
        where = f"action {s + 1}: " if n > 1 else ""
        seen.append(f"{where}{bbox_text(rows, cols)}, frames {idx[0] + 1}-{idx[-1] + 1} of {len(steps[s].frames)}")
    final = "the board that completed the level" if won is not None else "the final board"
    if not seen:
        return head + f"; no in-between frame shows anything {final} lost"
    more = f"; +{len(seen) - 3} more actions" if len(seen) > 3 else ""
    return head + "; seen only in between: " + "; ".join(seen[:3]) + more
