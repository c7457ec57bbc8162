"""What the model is told: the prompt files (prompts/*.j2, rendered strictly), the one tool's
schema and the reading of its calls, and the user message that opens a turn.

A turn message holds facts only (prompts/turn.j2): what the last acting call played, the net
change of the board over the WHOLE call (duck.game.change), its animations in one line, the
outcome, the step, the level, the actions on it and the valid actions (ACTION7 named UNDO); on
a new level the per-level memory (duck.agent.memory). Every object fact is true of the two
boards it names (`duck bench facts` checks them). Its images come first, then the text, which
lists them in order: the board now (`IMAGE_SCALE`), a diff, the board that completed a level,
the fatal frame after a GAME_OVER, up to `ANIMATION_IMAGES` mid-animation frames
(`ANIMATION_SCALE`); which, when, and the field's evidence for each: docs/agent.md, "What the
model sees". Images are rendered from grids (duck.game.images), so the conversation file
rebuilds them bit for bit; the prompt never holds more than `model.serve.images_per_prompt`
(duck.agent.context trims so that a turn's images fit). The tool message of a call is the
kernel's (`CallResult.text`, duck.sandbox.render).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jinja2
import numpy as np

from duck.game.actions import MODEL_NAMES
from duck.game.change import (HUD_BORDER, Pick, animation_line, changed_inside, completed_at, net_change,
                              pick_frames)
from duck.game.images import render as render_image
from duck.sandbox.batch_guards import BLOCK_FROM_LEVEL
from duck.sandbox.render import OUTPUT_CHARS

if TYPE_CHECKING:
    from duck.config import Config
    from duck.llm.reply import Reply
    from duck.play.conversation import ConversationWriter
    from duck.play.session import Session
    from duck.sandbox.host import CallResult

IMAGE_SCALE = 10  # the board at 640x640 px = 402 tokens on Qwen3-VL (duck.llm.vision)
ANIMATION_IMAGES = 4  # mid-animation frames at most per turn
ANIMATION_SCALE = 4  # 66 tokens each


def image_part(png: bytes) -> dict[str, Any]:
    return {"type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


# Prompt files (prompts/*.j2): no prompt text lives in Python.

@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    # The templates are package data of the top-level `prompts` package (in the wheel too).
    return jinja2.Environment(loader=jinja2.PackageLoader("prompts", ""), undefined=jinja2.StrictUndefined,
                              autoescape=False, keep_trailing_newline=False)


def render(name: str, **variables: Any) -> str:
    """Render prompts/<name> with strict undefined variables."""
    return _env().get_template(name).render(**variables).strip()


def system_prompt(cfg: Config) -> str:
    """prompts/system.j2 for a config (what it says follows the switches it describes)."""
    a = cfg.agent
    return render("system.j2", call_timeout_s=cfg.kernel.call_timeout_s, output_chars=OUTPUT_CHARS,
                  hud_border=HUD_BORDER, guards=a.guards,
                  guard_block_from=BLOCK_FROM_LEVEL)


def python_tool() -> list[dict[str, Any]]:
    """The one tool's schema; its description is prompts/tool.j2."""
    return [{"type": "function", "function": {
        "name": "python", "description": render("tool.j2", output_chars=OUTPUT_CHARS),
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]


class Correction(Exception):
    """A reply the loop cannot run; `message` is the short corrective sent back."""

    def __init__(self, reason: str, detail: Any = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.message = render("correct.j2", reason=reason, detail=detail)



def tool_calls(reply: Reply) -> list[tuple[str, str]]:
    """(call id, code) per tool call of a reply; raises Correction."""
    if reply.dropped:  # the client dropped an unreadable call: say why, run none
        raise Correction("dropped_call", reply.dropped[0]["why"])
    if not reply.tool_calls:
        raise Correction(f"cut_{reply.cut}" if reply.cut else "no_tool_call")
    out = []
    for c in reply.tool_calls:
        if c.name != "python":
            raise Correction("wrong_tool", c.name)
        try:
            args = json.loads(c.arguments or "{}")
        except (ValueError, RecursionError) as e:  # ('[' * 10**6: model text, issue 37)
            raise Correction("bad_arguments", f"invalid JSON: {e}") from e
        if not isinstance(args, dict):
            raise Correction("bad_arguments", "the arguments are not an object")
        strings = [v for v in args.values() if isinstance(v, str)]
        code = args.get("code", strings[0] if len(strings) == 1 else None)
        if not isinstance(code, str) or not code.strip():
            raise Correction("empty_code")
        if cut_in_string(code.rstrip()):
            raise Correction("dropped_call", "cut_in_string")
        out.append((c.id, code.rstrip()))
    return out


CUT_CHECK_CHARS = 200_000
_UNTERMINATED = re.compile(r"unterminated (?:triple-quoted )?(?:f-)?string literal \(detected at line (\d+)\)")


def cut_in_string(code: str) -> bool:
    """Whether `code` ends inside a string literal that its last line leaves open: what vLLM's
    qwen3_coder parser leaves of code holding the literal `</parameter>` (it ends the value
    there: `s = '</parameter>'` arrives as `s = '`, tests/conformance). Such a call is not run
    (it would be a SyntaxError the model cannot explain); the model is told why instead. Code
    longer than CUT_CHECK_CHARS (past any reply the output cap allows) is not compiled here: the
    worker reports its SyntaxError (compiling 1 MB takes the host ~1 s, issue 37)."""
    if len(code) > CUT_CHECK_CHARS:
        return False
    try:
        compile(code, "<call>", "exec", dont_inherit=True)
    except SyntaxError as e:
        m = _UNTERMINATED.fullmatch(str(e.msg))
        return bool(m) and int(m[1]) == len(code.splitlines())
    except (ValueError, RecursionError, MemoryError, OverflowError):  # (null bytes, absurd nesting)
        return False
    return False


# What a call's actions did

@dataclass
class CallFacts:
    """The facts of one acting call, for the next turn's message."""

    actions: list[str]
    before: np.ndarray  # the board before the call's first action
    final: np.ndarray  # the board after its last action (at GAME_OVER: the fatal frame)
    level: int = 1  # the level the call was played on
    won: bool = False
    level_completed: bool = False
    game_over: bool = False
    auto_reset: bool = False  # the loop played the RESET after GAME_OVER
    level_actions: int = 0  # the completed level's actions (all attempts), when one was completed
    change: str | None = None  # the net change of the whole call, one line (up to won_board on a level-up)
    changed_inside: bool = False  # anything changed away from the HUD border
    animation: str | None = None  # the animation line
    fatal_before: np.ndarray | None = None  # the last-alive board (before the fatal action)
    fatal_action: str | None = None
    won_board: np.ndarray | None = None  # the board that completed the level (its action's last frame before the switch)
    won_step: int = 0  # that action's index in the call
    won_of: int = 0  # and its frame count
    picks: list[Pick] = field(default_factory=list)  # mid-animation frames worth showing

    @property
    def count(self) -> int:
        return len(self.actions)

    @property
    def text(self) -> str:
        """A few words (the conversation's turn_end)."""
        return ("won" if self.won else "level completed" if self.level_completed else "GAME_OVER" if self.game_over
                else "board changed" if self.change and self.change != "no cell changed" else "no visible change")


def call_facts(r: CallResult, session: Session, level_before: int, before: np.ndarray,
               level_actions: int = 0) -> CallFacts:
    """What call result `r` did. `r.steps` (duck.game.change.Step per action played) gives the
    frames; a result without them gives only the boards before and after."""
    steps = list(r.steps)
    obs = session.obs
    final = steps[-1].after if steps else obs.grid
    f = CallFacts(list(r.actions), np.asarray(before), np.asarray(final), level=level_before + 1,
                  won=obs.state == "WIN", level_completed=obs.levels_completed > level_before,
                  game_over=obs.state == "GAME_OVER", level_actions=level_actions)
    won = completed_at(steps, level_before)
    if won is not None and len(steps[won].frames) > 1:
        f.won_board, f.won_step, f.won_of = np.asarray(steps[won].frames[-2]), won, len(steps[won].frames)
    if not (f.level_completed or f.won) or f.won_board is not None:  # (a new level's board is no change of the old one)
        nc = net_change(f.before, f.final if f.won_board is None else f.won_board)
        f.change, f.changed_inside = nc.text, nc.inside > 0
    if steps:
        f.animation = animation_line(steps, level_before=level_before)
    if f.game_over:
        f.fatal_before = np.asarray(steps[-1].before) if steps else f.before
        f.fatal_action = f.actions[-1] if f.actions else None
    f.picks = pick_frames(steps, ANIMATION_IMAGES, level_before=level_before)
    return f


# The turn message

@dataclass
class Shown:
    """One image of a turn message: how it was made (the conversation stores this) and what
    the text calls it."""

    kind: str  # duck.game.images kinds
    grids: tuple[np.ndarray, ...]
    scale: int
    caption: str

    def png(self) -> bytes:
        return render_image(self.kind, self.grids, self.scale)


def _action(last: CallFacts, step: int) -> str:
    """How a caption names an action of the call: "action 19 of the call (SPACE)", or "SPACE"."""
    name = last.actions[step] if step < len(last.actions) else "?"
    return f"action {step + 1} of the call ({name})" if last.count > 1 else name


def turn_images(session: Session, last: CallFacts | None, room: int) -> list[Shown]:
    """The images of a turn message, in order (see the module docstring); at most `room`
    (the board always: the loop trims the history first so that it has room)."""
    obs = session.obs
    out = [Shown("board", (obs.grid,), IMAGE_SCALE, f"the board now (step {session.game.actions})")]
    if last is None:
        return out
    extra: list[Shown] = []
    same_level = not (last.level_completed or last.won or last.game_over)
    if same_level and last.changed_inside:
        extra.append(Shown("diff", (last.before, obs.grid), IMAGE_SCALE,
                           "the board now with the cells your last call changed in colour, the rest dimmed"))
    if last.won_board is not None:
        extra.append(Shown("board", (last.won_board,), IMAGE_SCALE,
                           f"the board that completed level {last.level} ({_action(last, last.won_step)}, frame "
                           f"{last.won_of - 1} of {last.won_of}; frame {last.won_of} is level {last.level + 1}'s first board)"))
    if last.game_over:
        what = f" by {last.fatal_action}" if last.fatal_action else ""
        extra.append(Shown("board", (last.final,), IMAGE_SCALE, f"the board at GAME_OVER (the fatal frame{what})"))
        if last.fatal_before is not None and changed_inside(last.fatal_before, last.final):
            extra.append(Shown("diff", (last.fatal_before, last.final), IMAGE_SCALE,
                               f"the fatal frame with the cells changed{what} in colour, the rest dimmed"))
    for p in last.picks:
        extra.append(Shown("board", (p.grid,), ANIMATION_SCALE,
                           f"mid-animation: level {last.level}, {_action(last, p.step)}, frame {p.frame + 1} of {p.of}"))
    return out + extra[:max(0, room - 1)]


def turn_message(session: Session, last: CallFacts | None, stalled: int, first: bool, level_start: int, *,
                 memory: str = "", ask_rule: int | None = None, room: int = 1 << 30,
                 conv: ConversationWriter | None = None) -> dict[str, Any]:
    """The user message that opens a turn: its images, then prompts/turn.j2. `conv` (the
    game's conversation writer) learns how each image was made."""
    obs, game = session.obs, session.game
    shown = turn_images(session, last, room)
    text = render("turn.j2", first=first, last=last, stalled=stalled, level=obs.levels_completed + 1,
                  win_levels=game.win_levels, level_actions=game.actions - level_start, total_actions=game.actions,
                  valid_actions=MODEL_NAMES.valid(obs.available_actions), memory=memory, ask_rule=ask_rule,
                  images=[s.caption for s in shown])
    parts = []
    for s in shown:
        part = image_part(s.png())
        if conv is not None:
            conv.remember_image(part["image_url"]["url"], s.kind, s.grids, s.scale)
        parts.append(part)
    return {"role": "user", "content": parts + [{"type": "text", "text": text}]}


def count_images(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if isinstance(m.get("content"), list)
               for p in m["content"] if isinstance(p, dict) and p.get("type") in ("image_url", "image"))
