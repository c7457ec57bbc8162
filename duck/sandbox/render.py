"""What the model receives after a snippet, per dialect, and the Duck transcript's rendering.

`render_duck_dialect` builds the Duck's tool message exactly (../shared/duck-traces/README.md,
"What the model receives"): printing hides the action results, a time-out discards the
output, each of stdout/error/result is cut to 4,096 characters with `... [truncated N chars]`.
`render_our_dialect` keeps the shape but shows more, because hidden results and lost output
cost the model turns: stdout (head and tail), the `result` variable and the last action result
(with its animation summary) together, on a time-out the output so far plus whether the
definitions survived, whether the kernel had to be restarted, and `stopped` (the guard's line)
when a host guard ended the snippet (duck.sandbox.batch_guards).

`transcript` renders a message the way the Duck's transcripts (and so the traces'
`result` field) show it; the replay compares printed output through it.
"""

from __future__ import annotations

import json
from typing import Any

TRUNCATION_NOTE = "Tool output was cut off to stay within the ~1024-token response budget."


def _trim(text: str, limit: int, total: int | None = None) -> tuple[str, bool]:
    total = len(text) if total is None else max(total, len(text))
    if total <= limit:
        return text, False
    return f"{text[:limit]}\n... [truncated {total - limit} chars]", True


def render_duck_dialect(res: Any, *, timeout: float, limit: int, notes_error: str | None = None,
                        died: bool = False) -> dict[str, Any]:
    """The Duck's message for a CallResult (it had no notes; a dead kernel was not news: it
    started a process per call)."""
    if res.kind == "syntax":
        return {"error": res.error}
    if res.kind in ("timeout", "stopped"):
        return {"tool": "python", "error": f"Tool timed out after {timeout:g}s"}
    if res.kind == "crash":
        return {"tool": "python", "error": "Sandbox process exited unexpectedly."}
    msg: dict[str, Any] = {"tool": "python"}
    cut = False
    if res.error:
        msg["error"], c1 = _trim(res.error, limit)
        cut = cut or c1
        if res.stdout:
            msg["stdout"], c2 = _trim(res.stdout, limit, res.stdout_total)
            cut = cut or c2
    else:
        msg["returncode"] = 0
        if res.stdout:
            msg["stdout"], c2 = _trim(res.stdout, limit, res.stdout_total)
            cut = cut or c2
        elif res.result is not None:
            msg["result"] = res.result
            if isinstance(res.result, str):
                msg["result"], c3 = _trim(res.result, limit)
                cut = cut or c3
        elif res.action_results:
            msg["result"] = (res.action_results[-1] if len(res.action_results) == 1 else
                             {"action_calls": len(res.action_results),
                              "last_action_result": res.action_results[-1]})
    if cut:
        msg |= {"truncated": True, "truncation_note": TRUNCATION_NOTE}
    return msg


def render_our_dialect(res: Any, *, timeout: float, limit: int, notes_error: str | None = None,
                       died: bool = False) -> dict[str, Any]:
    """Our message for a CallResult; `died`: the worker had died since the previous call."""
    msg: dict[str, Any] = {"tool": "python"}
    guard = res.action_results[-1].get("guard") if res.action_results else None
    if res.kind == "stopped" and guard:  # a host guard ended the snippet (duck.sandbox.batch_guards)
        msg["stopped"] = guard
    elif res.kind in ("timeout", "stopped"):
        kept = "your definitions were kept" if not res.restarted else (
            "the kernel was restarted: your functions and variables are gone (game variables "
            "and notes are restored)")
        msg["error"] = f"Tool timed out after {timeout:g}s; {kept}."
        if res.error and not res.restarted:
            msg["interrupted_at"], _ = _trim(res.error, limit)
    elif res.kind == "crash" and str(res.error_kind).startswith(("protocol", "its temp")):
        msg["error"] = (f"The kernel was stopped ({res.error_kind}) and restarted: your functions and "
                        "variables are gone (game variables and notes are restored).")
    elif res.kind == "crash":
        msg["error"] = (f"The kernel process died ({res.error_kind}); it was restarted: your "
                        "functions and variables are gone (game variables and notes are restored).")
    elif res.error:
        msg["error"], _ = _trim(res.error, limit)
    else:
        msg["returncode"] = 0
    if res.stdout:
        msg["stdout"] = res.stdout
        if res.stdout_total > len(res.stdout):
            msg["truncated"] = True
            msg["truncation_note"] = (f"printed {res.stdout_total} characters; only the first and "
                                      "last parts are shown")
    if res.result is not None:
        text = _dumps(res.result)
        msg["result"] = res.result if len(text) <= limit else _trim(text, limit)[0]
    if res.action_results:
        msg["action_calls"] = len(res.action_results)
        msg["last_action_result"] = res.action_results[-1]
    elif res.actions:
        msg["executed_actions"] = list(res.actions)
    if notes_error:
        msg["notes_error"] = notes_error
    kernel = []
    if died:
        kernel.append("the kernel process had died since the last call and was restarted: your "
                      "functions and variables are gone")
    if getattr(res, "notice", None):
        kernel.append(res.notice)
    if kernel:
        msg["kernel"] = "; ".join(kernel)
    return msg


def _dumps(value: Any) -> str:
    """JSON of a value from the worker (the host has bounded it: duck.sandbox.trust); never raises."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return json.dumps(str(value)[:100_000])


# --- the Duck transcript's rendering (for comparing with the traces) -------------------

def _scalar(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=True)


def _lines(value: Any, indent: int = 0) -> list[str]:
    pre = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pre + "{}"]
        out = []
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                out.append(f"{pre}{k}:")
                out += _lines(v, indent + 2)
            elif isinstance(v, str) and "\n" in v:
                out.append(f"{pre}{k}: |")
                out += [f"{pre}  {line}" for line in (v.splitlines() or [""])]
            else:
                out.append(f"{pre}{k}: {_scalar(v)}")
        return out
    if isinstance(value, list):
        if not value:
            return [pre + "[]"]
        out = []
        for v in value:
            if isinstance(v, (dict, list)):
                out.append(pre + "-")
                out += _lines(v, indent + 2)
            elif isinstance(v, str) and "\n" in v:
                out.append(pre + "- |")
                out += [f"{pre}  {line}" for line in (v.splitlines() or [""])]
            else:
                out.append(f"{pre}- {_scalar(v)}")
        return out
    if isinstance(value, str):
        if "\n" in value:
            return [pre + "|"] + [f"{pre}  {line}" for line in (value.splitlines() or [""])]
        return [pre + value]
    return [pre + _scalar(value)]


def transcript(message: dict[str, Any]) -> str:
    """The transcript text of a tool message (a round trip through JSON, as the Duck did;
    the transcript strips each section)."""
    return _transcript(message).strip()


def _transcript(message: dict[str, Any]) -> str:
    parsed = json.loads(json.dumps(message))
    stdout = str(parsed.get("stdout", "") or "").rstrip("\n")
    error = str(parsed.get("error", "") or "").rstrip("\n")
    result = parsed.get("result")
    has_result = result not in (None, "", [], {})
    if stdout and not error and not has_result:
        return stdout
    blocks = []
    if stdout:
        blocks.append(stdout)
    if has_result:
        text = "\n".join(_lines(result))
        blocks.append(f"result:\n{text}" if stdout else text)
    if error:
        blocks.append(f"error:\n{error}" if (stdout or has_result) else error)
    if blocks:
        return "\n\n".join(b for b in blocks if b.strip())
    return "\n".join(_lines(parsed))
