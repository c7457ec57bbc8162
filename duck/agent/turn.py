"""What the model is told: the prompt files (prompts/*.j2, rendered strictly), the one tool's
schema, the user message that opens a turn, and the tool message of a call.

A turn message holds facts only (prompts/turn.j2): what the last acting call played, the net
change of the board over the WHOLE call (duck.game.change: cells, objects, whether anything
changed away from the HUD border), its animations in one line, the guards that fired, the
outcome in accurate words (level completed, GAME_OVER and the level restarted, won), the step,
the level, the actions spent on it, the valid actions (ACTION7 named UNDO); on a new level the
per-level memory (duck.agent.memory). Its images come first in the content, then the text,
which lists them in order (vLLM puts a message's images before its text anyway):

1. the board now, at `agent.image_scale` (10x: 640 px, 402 tokens: duck.llm.vision);
2. a diff (`agent.diff_image`): the board with the cells the last call changed in colour and
   the rest dimmed, when it changed away from the HUD border and stayed on the same level;
3. after a GAME_OVER (`agent.death_images`): the fatal frame and the last-alive -> fatal diff;
4. up to `agent.animation_images` mid-animation frames that hold what the final board lost
   (duck.game.change.pick_frames), at `agent.animation_image_scale`.

Optional images are left out when the prompt would pass `model.serve.images_per_prompt`.
Every image is rendered from grids (duck.game.images), and the conversation file stores the
grids, so it rebuilds each PNG bit for bit (duck.play.conversation).

A tool message (`tool_content`) is plain text with `agent.compact_results`: the output, the
`result` value, the error, and one line for the actions the call played; else the kernel's
JSON (the Duck's shape).

The history these messages go into, and its token budget, is duck.agent.context.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2
import numpy as np

from duck.game.actions import OUR_DIALECT_NAMES
from duck.game.change import Pick, animation_line, net_change, pick_frames
from duck.game.images import render as render_image


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


def system_prompt(cfg: Any) -> str:
    """prompts/system.j2 for a config (what it says follows the switches it describes)."""
    a = cfg.agent
    return render("system.j2", call_timeout_s=cfg.kernel.call_timeout_s, output_chars=cfg.kernel.output_chars,
                  world_model_tools=a.world_model_tools, notes_in_turn=a.notes_in_turn,
                  level_memory=a.level_memory, hud_border=a.hud_border,
                  guard_stop=a.guard_stop_on_no_effect, guard_block_from=a.guard_block_from_level,
                  compact_results=a.compact_results, diff_image=a.diff_image, death_images=a.death_images,
                  animation_images=a.animation_images)


def python_tool(output_chars: int) -> list[dict[str, Any]]:
    """The one tool's schema; its description is prompts/tool.j2."""
    return [{"type": "function", "function": {
        "name": "python", "description": render("tool.j2", output_chars=output_chars),
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]


def compress(actions: list[str]) -> str:
    """['UP', 'UP', 'LEFT'] → 'UP x2, LEFT'."""
    out: list[list[Any]] = []
    for a in actions:
        if out and out[-1][0] == a:
            out[-1][1] += 1
        else:
            out.append([a, 1])
    return ", ".join(f"{a} x{n}" if n > 1 else a for a, n in out)


def valid_names(available: list[int]) -> list[str]:
    """The valid actions as the turn lists them: our names (ACTION7 as UNDO), each one a name
    `action()` accepts as written."""
    return OUR_DIALECT_NAMES.valid(available)


# What a call's actions did

@dataclass
class CallFacts:
    """The facts of one acting call, for the next turn's message (and the context's summary)."""

    actions: list[str]
    before: np.ndarray  # the board before the call's first action
    final: np.ndarray  # the board after its last action (at GAME_OVER: the fatal frame)
    won: bool = False
    level_completed: bool = False
    game_over: bool = False
    auto_reset: bool = False  # the loop played the RESET after GAME_OVER
    level_actions: int = 0  # the completed level's actions (all attempts), when one was completed
    change: str | None = None  # the net change of the whole call, one line
    changed_inside: bool = False  # anything changed away from the HUD border
    animation: str | None = None  # the animation line (agent.animation_summaries)
    guards: list[str] = field(default_factory=list)  # one line per guard that fired
    fatal_before: np.ndarray | None = None  # the last-alive board (before the fatal action)
    fatal_action: str | None = None
    picks: list[Pick] = field(default_factory=list)  # mid-animation frames worth showing

    @property
    def count(self) -> int:
        return len(self.actions)

    @property
    def actions_text(self) -> str:
        return compress(self.actions)

    @property
    def text(self) -> str:
        """A few words (the context's summary of dropped turns, the conversation's turn_end)."""
        return ("won" if self.won else "level completed" if self.level_completed else "GAME_OVER" if self.game_over
                else "board changed" if self.change and self.change != "no cell changed" else "no visible change")


def call_facts(r: Any, session: Any, agent: Any, level_before: int, before: np.ndarray,
               level_actions: int = 0) -> CallFacts:
    """What call result `r` did. `r.steps` (duck.game.change.Step per action, from the real
    kernel) gives the frames; a kernel without them gives only the boards before and after."""
    steps = list(getattr(r, "steps", None) or [])
    obs = session.obs
    final = steps[-1].after if steps else obs.grid
    f = CallFacts(list(r.actions), np.asarray(before), np.asarray(final), won=obs.state == "WIN",
                  level_completed=obs.levels_completed > level_before, game_over=obs.state == "GAME_OVER",
                  level_actions=level_actions)
    if not (f.level_completed or f.won):  # a new level's board is no change of the old one
        nc = net_change(f.before, f.final, agent.hud_border)
        f.change, f.changed_inside = nc.text, nc.inside > 0
    if agent.animation_summaries and steps:
        f.animation = animation_line(steps, agent.hud_border)
    f.guards = list(dict.fromkeys(x["guard"] for x in getattr(r, "action_results", []) or []
                                  if isinstance(x, dict) and isinstance(x.get("guard"), str)))
    if f.game_over:
        f.fatal_before = np.asarray(steps[-1].before) if steps else f.before
        f.fatal_action = f.actions[-1] if f.actions else None
    f.picks = pick_frames(steps, agent.animation_images, agent.hud_border)
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


def turn_images(session: Any, agent: Any, last: CallFacts | None, room: int) -> list[Shown]:
    """The images of a turn message, in order (see the module docstring); at most `room`
    (the board always)."""
    obs = session.obs
    out = [Shown("board", (obs.grid,), agent.image_scale, f"the board now (step {session.game.actions})")]
    if last is None:
        return out
    extra: list[Shown] = []
    same_level = not (last.level_completed or last.won or last.game_over)
    if agent.diff_image and same_level and last.changed_inside:
        extra.append(Shown("diff", (last.before, obs.grid), agent.image_scale,
                           "the board now with the cells your last call changed in colour, the rest dimmed"))
    if agent.death_images and last.game_over:
        what = f" by {last.fatal_action}" if last.fatal_action else ""
        extra.append(Shown("board", (last.final,), agent.image_scale, f"the board at GAME_OVER (the fatal frame{what})"))
        if last.fatal_before is not None:
            extra.append(Shown("diff", (last.fatal_before, last.final), agent.image_scale,
                               f"the fatal frame with the cells changed{what} in colour, the rest dimmed"))
    for p in last.picks:
        action = last.actions[p.step] if p.step < len(last.actions) else "?"
        where = f"action {p.step + 1} of the call ({action})" if last.count > 1 else action
        extra.append(Shown("board", (p.grid,), agent.animation_image_scale,
                           f"mid-animation: {where}, frame {p.frame + 1} of {p.of}"))
    return out + extra[:max(0, room - 1)]


def turn_message(session: Any, agent: Any, notes: Any, last: CallFacts | None, stalled: int, first: bool,
                 level_start: int, *, memory: str = "", ask_rule: int | None = None, room: int = 1 << 30,
                 conv: Any = None, show_notes: bool | None = None) -> dict[str, Any]:
    """The user message that opens a turn: its images, then prompts/turn.j2. `conv` (the
    game's conversation writer) learns how each image was made; the notes are shown with
    `agent.notes_in_turn`, or where `show_notes` says so (a fresh context's first turn)."""
    show_notes = agent.notes_in_turn if show_notes is None else show_notes
    obs, game = session.obs, session.game
    shown = turn_images(session, agent, last, room)
    text = render("turn.j2", first=first, last=last, stalled=stalled, level=obs.levels_completed + 1,
                  counts=agent.action_counts_in_prompt, win_levels=game.win_levels,
                  level_actions=game.actions - level_start, total_actions=game.actions,
                  notes=notes.view() if show_notes else [], notes_in_turn=show_notes,
                  valid_actions=valid_names(obs.available_actions), memory=memory, ask_rule=ask_rule,
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


# The tool message of a call

def without_animation(message: dict[str, Any]) -> str:
    """The tool message without animation summaries (the A/B baseline: the Duck had none)."""
    def strip(v: Any) -> Any:
        return {k: x for k, x in v.items() if k != "animation"} if isinstance(v, dict) else v
    return json.dumps({k: strip(v) for k, v in message.items()}, indent=2, default=str)


_STOPS = {"level_completed": "the level was completed", "game_over": "GAME_OVER", "run_complete": "the game is won",
          "invalid_action": "the next action is not valid now", "stopped": "stopped: out of time",
          "action_error": "the next action was refused"}
_PREVIOUS = {"previous_level_completed": "an earlier action of this call completed a level",
             "previous_game_over": "an earlier action of this call reached GAME_OVER",
             "previous_run_complete": "the game is won", "previous_done": "the game is won"}


def action_line(r: Any) -> list[str]:
    """The lines about a call's actions: one for what it played, one per refusal or guard."""
    results = [x for x in getattr(r, "action_results", []) or [] if isinstance(x, dict)]
    lines: list[str] = []
    if r.actions:
        played = [x for x in results if x.get("executed")]
        stop = _STOPS.get(str(played[-1].get("stop_reason"))) if played else None
        lines.append(f"actions: {len(r.actions)} played: {compress(list(r.actions))}"
                     + (f" ({stop})" if stop else "") + "; the next message shows the board")
    for x in results:
        reason = str(x.get("stop_reason") or "")
        if isinstance(x.get("guard"), str):
            line = x["guard"]
        elif reason.startswith("previous_"):
            line = f"not played: {_PREVIOUS.get(reason, 'the game state is terminal')}; no further action in this call"
        elif not x.get("executed") and x.get("error"):
            line = f"not played: {x['error']}"
        else:
            continue
        if line not in lines:
            lines.append(line)
    return lines


def tool_content(r: Any, agent: Any) -> str:
    """The tool message of call result `r` (see the module docstring)."""
    msg = getattr(r, "message", None)
    if not isinstance(msg, dict) or not msg:
        return r.text
    if not agent.compact_results:
        return r.text if agent.animation_summaries else without_animation(msg)
    out: list[str] = []
    if msg.get("error"):
        err = str(msg["error"])
        out.append(f"error:\n{err}" if "\n" in err else f"error: {err}")
    if msg.get("interrupted_at"):
        out.append(f"interrupted at:\n{msg['interrupted_at']}")
    if msg.get("stdout"):
        out.append("stdout:\n" + str(msg["stdout"]).rstrip("\n"))
        if msg.get("truncated"):
            out.append(f"({msg.get('truncation_note', 'output cut')})")
    if "result" in msg:
        v = msg["result"]
        out.append("result: " + (v if isinstance(v, str) else json.dumps(v, default=str)))
    out += action_line(r)
    for key in ("notes_error", "kernel"):
        if msg.get(key):
            out.append(f"{key.replace('_', ' ')}: {msg[key]}")
    return "\n".join(out) if out else "(no output)"

