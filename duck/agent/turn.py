"""What the model is told: the prompt files (prompts/*.j2, rendered strictly), the one
tool's schema, the user message that opens a turn (the text and the board as a PNG, ARC
palette, upscaled by `agent.image_scale`), and what a call's actions did.

The history those messages go into, and its token budget, is duck.agent.context.
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from typing import Any

import jinja2

from duck.game.actions import OUR_DIALECT_NAMES
from duck.game.frames import grid_png


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


def python_tool(output_chars: int) -> list[dict[str, Any]]:
    """The one tool's schema; its description is prompts/tool.j2."""
    return [{"type": "function", "function": {
        "name": "python", "description": render("tool.j2", output_chars=output_chars),
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]


# What the model is told each turn

def turn_message(session: Any, agent: Any, notes: Any, last: dict[str, Any] | None, stalled: int,
                 first: bool, level_start: int) -> dict[str, Any]:
    """The user message that opens a turn (prompts/turn.j2 and the board as a PNG)."""
    obs, game = session.obs, session.game
    text = render("turn.j2", first=first, last=last, stalled=stalled, level=obs.levels_completed + 1,
                  counts=agent.action_counts_in_prompt, win_levels=game.win_levels,
                  level_actions=game.actions - level_start, total_actions=game.actions,
                  actions_left=session.actions_left, notes=notes.view(),
                  valid_actions=OUR_DIALECT_NAMES.valid(obs.available_actions))
    png = grid_png(obs.grid, agent.image_scale)
    return {"role": "user", "content": [{"type": "text", "text": text}, image_part(png)]}


def without_animation(message: dict[str, Any]) -> str:
    """The tool message without animation summaries (the A/B baseline: the Duck had none)."""
    def strip(v: Any) -> Any:
        return {k: x for k, x in v.items() if k != "animation"} if isinstance(v, dict) else v
    return json.dumps({k: strip(v) for k, v in message.items()}, indent=2, default=str)


def outcome(r: Any, session: Any, level_before: int, animation: bool = True) -> dict[str, Any]:
    """What a call's actions did, for the next turn's message and the context summary."""
    done = [x for x in r.action_results if x.get("executed")]
    obs = session.obs
    text = ("won" if obs.state == "WIN" else "level completed" if obs.levels_completed > level_before
            else "GAME_OVER" if obs.state == "GAME_OVER"
            else "board changed" if any(x.get("board_changed") for x in done) else "no visible change")
    return {"count": len(r.actions), "actions": list(r.actions),
            "animation": (done or [{}])[-1].get("animation") if animation else None,
            "board_changed": any(x.get("board_changed") for x in done) if done else None, "text": text,
            "won": obs.state == "WIN", "level_completed": obs.levels_completed > level_before,
            "game_over": obs.state == "GAME_OVER", "auto_reset": False}
