"""The tool message the model receives after a snippet, rendered once from its `CallResult`.

Plain text, one part per line or block, in this order: the error (or why the call was
stopped: a time-out and whether the definitions survived, a restarted kernel), where a
time-out interrupted the code, what it printed (head and tail, with a note when cut), the
`result` variable, one line for the actions the call played and one per refusal or guard
(duck.sandbox.batch_guards), why `notes` was not kept, and what the host did about the worker.
The action results themselves (the Duck's dicts) stay in Python (`last_action_result`); the
next turn message shows the board.
"""

from __future__ import annotations

import json
from typing import Any

from duck.game.actions import compress

OUTPUT_CHARS = 4096  # printed output kept of a call (head and tail); an error or `result` is cut to it (the Duck's cap)
MESSAGE_CHARS = 32_000  # the whole message, whatever the worker sent
MAX_LINES = 20  # action lines (refusals, guards) of one message

_STOPS = {"level_completed": "the level was completed", "game_over": "GAME_OVER", "run_complete": "the game is won",
          "invalid_action": "the next action is not valid now", "stopped": "stopped: out of time",
          "action_error": "the next action was refused"}
_PREVIOUS = {"previous_level_completed": "an earlier action of this call completed a level",
             "previous_game_over": "an earlier action of this call reached GAME_OVER",
             "previous_run_complete": "the game is won", "previous_done": "the game is won"}
_GONE = "your functions and variables are gone (game variables and notes are restored)"


def tool_text(res: Any) -> str:
    """The tool message of a duck.sandbox.host.CallResult."""
    out: list[str] = []
    error, interrupted = _error(res)
    if error:
        out.append(f"error:\n{error}" if "\n" in error else f"error: {error}")
    if interrupted:
        out.append(f"interrupted at:\n{interrupted}")
    if res.stdout:
        out.append("stdout:\n" + res.stdout.rstrip("\n"))
        if res.stdout_total > len(res.stdout):
            out.append(f"(printed {res.stdout_total} characters; only the first and last parts are shown)")
    if res.result is not None:
        text = _dumps(res.result)
        value = res.result if len(text) <= OUTPUT_CHARS else _trim(text, OUTPUT_CHARS)
        out.append("result: " + (value if isinstance(value, str) else json.dumps(value, default=str)))
    out += action_lines(res)
    if res.notes_error:
        out.append(f"notes error: {res.notes_error}")
    kernel = ["the kernel process had died since the last call and was restarted: your functions and variables "
              "are gone"] if res.died else []
    if res.notice:
        kernel.append(res.notice)
    if kernel:
        out.append("kernel: " + "; ".join(kernel))
    text = "\n".join(out) if out else "(no output)"
    cap = MESSAGE_CHARS
    return text if len(text) <= cap else f"{text[:cap * 2 // 3]}\n... [{len(text) - cap} chars cut] ...\n{text[-cap // 3:]}"


def _error(res: Any) -> tuple[str, str]:
    """(the error line or block, where a time-out interrupted the code)."""
    guard = res.action_results[-1].get("guard") if res.action_results else None
    if res.kind == "stopped" and guard:  # a host guard ended the snippet: its line is an action line
        return "", ""
    if res.kind in ("timeout", "stopped"):
        kept = "your definitions were kept" if not res.restarted else f"the kernel was restarted: {_GONE}"
        where = _trim(res.error, OUTPUT_CHARS) if res.error and not res.restarted else ""
        return f"Tool timed out after {res.timeout_s:g}s; {kept}.", where
    if res.kind == "crash" and str(res.error_kind).startswith(("protocol", "its temp")):
        return f"The kernel was stopped ({res.error_kind}) and restarted: {_GONE}.", ""
    if res.kind == "crash":
        return f"The kernel process died ({res.error_kind}); it was restarted: {_GONE}.", ""
    return (_trim(res.error, OUTPUT_CHARS) if res.error else ""), ""


def action_lines(res: Any) -> list[str]:
    """The lines about a call's actions: one for what it played, one per refusal or guard."""
    results = [x for x in res.action_results or [] if isinstance(x, dict)]
    lines: list[str] = []
    if res.actions:
        played = [x for x in results if x.get("executed")]
        stop = _STOPS.get(str(played[-1].get("stop_reason"))) if played else None
        lines.append(f"actions: {len(res.actions)} played: {compress(list(res.actions))}"
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
    if len(lines) > MAX_LINES:  # hundreds of refused requests: the first ones say it
        lines[MAX_LINES:] = [f"... {len(lines) - MAX_LINES} more lines like these"]
    return lines


def _trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... [truncated {len(text) - limit} chars]"


def _dumps(value: Any) -> str:
    """JSON of a value from the worker (the host has bounded it: duck.sandbox.trust); never raises."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return json.dumps(str(value)[:100_000])
