"""What `duck play` says when the run ends, and its exit status.

On a terminal (stdout is a tty) the live table gives way to the summary table of every game
(duck.run.progress), then a few lines: warnings, the first policy traceback, the commands
to run next, and last the run's score over all its games (a pipe: on stderr; a run whose every
game errored has none: the error is last). Elsewhere (a pipe, a file), or with `--json`, stdout holds
the summary as JSON (what scripts and tests read) and the lines go to stderr. The "next"
commands name duck as the user ran it (duck.run.info.duck_command: `.venv/bin/duck` as in the
README, or `duck` on PATH).

A game whose policy raised keeps its traceback in its record (an `error` event's data): the
first one is printed on stderr, all of them with `duck -v play`. Exit status: 0; 130
(Ctrl-C), 143 (SIGTERM); 1 when the disk filled, or when every game ended in an error (a
policy that fails on every game is a failed run, not a result).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from duck.play.record import read_record
from duck.run.info import duck_command

EXIT_FAILED = 1
ABOUT = ("score: the mean over games of the official ARC-AGI-3 score in percent (a level scores (human baseline "
         "actions / actions)^2, capped at 115%; levels weighted 1, 2, 3, ...); levels: levels completed; "
         "actions: actions sent, RESETs included")


def say(text: str) -> None:
    print(f"duck play: {text}", file=sys.stderr)


def summary_json(out: Any, doc: dict) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "score": round(doc["score"], 4), "toolkit_score": doc.get("toolkit_score"),
        "games": {g: {"levels": v["levels"], "actions": v["actions"], "score": round(v["score"], 3),
                      **({"error": v["error"]} if "error" in v else {})} for g, v in doc["games"].items()}}
    for key in ("partial", "run_status", "missing", "unfinished", "score_missing_as_0", "fallback"):
        if doc.get(key) not in (None, [], False) or key == "partial":
            summary[key] = doc.get(key, False)
    summary["about"] = ABOUT
    summary["next"] = next_commands(out, doc)
    return summary


def next_commands(out: Any, doc: dict) -> list[str]:
    duck = duck_command()
    return [f"{duck} report {out}", f"{duck} score {out}"] + \
        ([f"{duck} play --resume --out {out}"] if doc.get("partial") else [])


def tracebacks(out: Path, errors: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(game, traceback) of each errored game that has one: from its end message (a policy
    that could not be made: no record), else from its record (a policy that raised)."""
    found = []
    for e in errors:
        text = e.get("traceback")
        if not text:
            try:
                rec = read_record(Path(out) / "records" / f"{e['game']}.jsonl")
            except (OSError, ValueError):
                continue
            text = next((x["data"] for x in rec.events if x.get("kind") == "error" and isinstance(x.get("data"), str)
                         and "Traceback" in x["data"]), None)
        if text:
            found.append((e["game"], text.rstrip()))
    return found


def after_play(out: Any, doc: dict, *, as_json: bool, verbose: bool, interrupted_code: int) -> int:
    """The end of `duck play` (see the module docstring); returns the exit status."""
    terminal = sys.stdout.isatty() and not as_json
    if not terminal:
        print(json.dumps(summary_json(out, doc), indent=1), flush=True)
    warn_problems(doc)
    if doc.get("resumed") == []:
        say(f"nothing to resume: every game of {out} has finished (score.json recomputed)")
    errors = doc.get("errors") or []
    shown = tracebacks(Path(out), errors)
    for game, text in shown if verbose else shown[:1]:
        more = "" if verbose or len(shown) == 1 else f" (and {len(shown) - 1} more: duck -v play shows them all)"
        say(f"{game}: the policy raised{more}:\n{text}")
    code = _ending(out, doc)
    if terminal:
        print("next: " + " · ".join(next_commands(out, doc)))
    if code == 0 and errors and len(errors) == doc.get("played"):  # no score: the error is the last line
        say(f"error: every game ended in an error ({errors[0]['error']}); nothing was measured")
        return EXIT_FAILED
    # The last line: the run's score over all its games (after a resume too), not that of those just played.
    print(score_line(out, doc) if terminal else f"duck play: {score_line(out, doc)}",
          file=sys.stdout if terminal else sys.stderr)
    return interrupted_code if code == -1 else code


def score_line(out: Any, doc: dict) -> str:
    """`score 14.463% (the run's score: mean over its 3 games; 7 levels completed) → RUN`."""
    levels = sum(v["levels"] for v in doc["games"].values())
    missing, short = len(doc.get("missing") or []), len(doc.get("unfinished") or [])
    partial = f"; partial: {missing} not played, {short} stopped mid-game" if doc.get("partial") else ""
    n = len(doc["games"])
    return (f"score {doc['score']:.3f}% (the run's score: mean over its {n} game{'' if n == 1 else 's'} "
            f"recorded; {levels} level{'' if levels == 1 else 's'} completed{partial}) → {out}")


def _ending(out: Any, doc: dict) -> int:
    """The run's ending in one line on stderr when it did not end by itself: 0, -1 (interrupted
    by Ctrl-C: the caller's code), 143 (SIGTERM) or 1 (disk full)."""
    status = doc.get("run_status")
    played = len(doc["games"])
    short = len(doc.get("unfinished") or [])
    missing = len(doc.get("missing") or [])
    where = doc.get("not_written") or \
        f"score.json marked partial (score {doc['score']:.3f} over the {played} game(s) recorded)"
    resume = f"{duck_command()} play --resume --out {out}"
    if doc.get("fallback"):
        fb = doc["fallback"]
        say(f"the model became unreachable: the explorer finished {len(fb)} game(s) "
            f"({', '.join(fb[:5])}{', ...' if len(fb) > 5 else ''})")
    if status == "interrupted":
        say(f"interrupted ({doc.get('stopped_by') or 'Ctrl-C'}): {played - short} game(s) finished, "
            f"{short} stopped mid-game, {missing} not started; {where}; finish with: {resume}")
        return -1 if doc.get("stopped_by") != "SIGTERM" else 128 + 15
    if status == "disk_full":
        say(f"error: the disk is full: the run stopped ({played - short} game(s) finished, {short} cut, "
            f"{missing} not started; records keep every line written); {where}; free space, then: {resume}")
        return EXIT_FAILED
    return 0


def warn_problems(doc: dict) -> None:
    """One line each on stderr: records with skipped lines, scores the toolkit disagrees with."""
    for game, problems in (doc.get("record_problems") or {}).items():
        print(f"duck: warning: record of {game}: {len(problems)} line(s) skipped ({problems[0]})", file=sys.stderr)
    if doc.get("disagrees"):
        print(f"duck: warning: the toolkit's scorecard disagrees on {', '.join(doc['disagrees'])}", file=sys.stderr)
