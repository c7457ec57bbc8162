"""`duck replay TRACES_DIR --games DIR --out RUN_DIR`: the Duck's recorded code, re-run.

Every game-run of a duck-traces folder is started fresh and each recorded snippet is run, in
order, through our kernel (the one our agent plays with: the Duck's variables and action names,
ours added), following ../shared/duck-traces/README.md, "Replaying this code faithfully": each
snippet is capped at its recorded number of actions (devkit.replay.caps.ReplayKernel), turns
that ended because the run's 2,700 s were up stop once their recorded actions are done, and
the automatic RESETs are performed where the record has them. Actions go through `Session`, so
the replay leaves normal records in RUN_DIR/records/.

RUN_DIR/replay.json, per run and overall: `snippet_match`, `run_identical` and `stdout_match`
(snippets, runs and printed outputs equal to the recorded ones), call times, the outcomes, and
each mismatch with a category that explains it (`order`, `killed_call_timing`, `error_vs_ok`,
...); every field and category: docs/workbench.md, "The replay".
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from duck.config import KernelConfig
from duck.game.actions import RESET
from duck.game.source import GameSource, matches
from devkit.replay.caps import RecordedCap, ReplayKernel, trace_caps
from duck.play.session import recorded_session
from devkit.stub.traces import load_runs, load_trace

_TIMER = re.compile(r"((?:run_elapsed_seconds|time_remaining_seconds)['\"]?\s*[:=]\s*)-?[0-9][0-9.e+-]*")
_SET = re.compile(r"\{([^{}:]*)\}")


def normalise(text: str) -> str:
    """Timer values out, set literals sorted (the Duck's string hashes were unseeded)."""
    text = _TIMER.sub(r"\1T", text)
    return _SET.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)


def shown(res: Any) -> str:
    """What the Duck's transcript showed of a call that printed: its output, then the error if
    one was raised (the recorded `result` is that text)."""
    out, error = res.stdout.rstrip("\n"), (res.error or "").rstrip("\n")
    return (f"{out}\n\nerror:\n{error}" if out and error else out or error).strip()


def categorise(ours: str, rec: str, res: Any) -> str:
    """Why a printed output differs (see the module docstring of the report)."""
    if res.kind in ("timeout", "stopped", "crash"):
        return f"ours_{res.kind}"
    prev = "'stop_reason': 'previous_"
    if (prev in ours) != (prev in rec):
        # A call the Duck killed after a GAME_OVER/level-up: whether its next action() got
        # its `previous_...` answer before the 30 s kill is a matter of the Duck's timing.
        return "killed_call_timing"
    diff = _first_diff(ours, rec)
    if sorted(ours) == sorted(rec) or sorted(diff["ours"]) == sorted(diff["recorded"]):
        return "order"  # same characters, other order: set/dict iteration, hash seed
    if ("Traceback" in ours) != ("Traceback" in rec):
        return "error_vs_ok"
    if "Traceback" in ours:
        return "error_text"
    return "other"


@cache
def _source(games_dir: str) -> Any:
    return GameSource.offline(games_dir)  # (one per folder and worker process)


def replay_run(meta: dict[str, Any], turns: list[dict[str, Any]], games_dir: str, out_dir: str,
               timeout_s: float = 30.0) -> dict[str, Any]:
    """Replay one game-run; returns its statistics (JSON-safe)."""
    game_id, pass_ = meta["game_id"], meta["pass"]
    path = Path(out_dir) / "records" / f"{game_id}_p{pass_}.jsonl"
    path.unlink(missing_ok=True)
    session = recorded_session(_source(games_dir), game_id, path, policy="duck-replay", seed=None,
                            config={"traces": True}, pass_=pass_)
    game, writer = session.game, session.writer
    kernel = ReplayKernel(session, KernelConfig(call_timeout_s=timeout_s), trace_caps(turns),
                          time_limit_s=meta.get("time_limit_seconds", 2700.0), deny_read=[games_dir])
    st: dict[str, Any] = {"game_id": game_id, "pass": pass_, "snippets": 0, "counted": 0,
                          "matched": 0, "stdout_compared": 0, "stdout_matched": 0,
                          "kinds": Counter(), "error_kinds": Counter(), "call_ms": [],
                          "mismatches": [], "stdout_misses": [], "complete": True,
                          "recorded_timeouts": 0}
    try:
        kernel.start()
        for turn in turns:
            for _ in turn.get("pre_turn_auto_actions", []):
                kernel.act(RESET, {"auto": True})
            for call in turn["calls"]:
                _replay_call(kernel, turn, call, st, timeout_s)
        for _ in meta.get("trailing_auto_actions", []):
            kernel.act(RESET, {"auto": True})
    finally:
        kernel.close()
        writer.end("replay_done", game.levels, game.actions, game.obs.state)
    st["levels"], st["actions"] = game.levels, game.actions
    st["identical"] = (st["complete"] and st["matched"] == st["counted"]
                       and game.levels == meta["levels_completed"] and game.actions == meta["actions"])
    st["kinds"], st["error_kinds"] = dict(st["kinds"]), dict(st["error_kinds"])
    return st


def _replay_call(kernel: Any, turn: dict[str, Any], call: dict[str, Any], st: dict[str, Any],
                 timeout_s: float) -> None:
    rec = call.get("actions") or []
    cap = RecordedCap.of(turn, call)
    complete = call.get("actions_complete", True) is not False
    st["snippets"] += 1
    st["recorded_timeouts"] += bool(call.get("timed_out"))
    st["complete"] = st["complete"] and complete
    code = "" if call.get("code_missing") else call["code"]
    res = kernel.run(code, timeout_s=timeout_s, info={"turn": turn["turn_index"], "call": call["call_index"]})
    st["call_ms"].append(round(res.wall_ms, 2))
    st["kinds"][res.kind] += 1
    if res.kind == "error" and res.error:
        st["error_kinds"][res.error.rsplit("\n", 1)[-1].split(":", 1)[0][:40]] += 1
    where = {"turn": turn["turn_index"], "call": call["call_index"]}
    if complete:
        st["counted"] += 1
        if res.actions == rec:
            st["matched"] += 1
        elif len(st["mismatches"]) < 20:
            st["mismatches"].append(where | {"recorded": rec[:12], "ours": res.actions[:12],
                                             "kind": res.kind})
    if cap.actions == 0 and not call.get("timed_out") and not call.get("code_missing") and "print" in code:
        a, b = normalise(shown(res)), normalise(call["result"])
        if call.get("result_cut"):  # the record keeps 2,000 characters (timer digits differ)
            a = a[:len(b)]
        st["stdout_compared"] += 1
        if a == b:
            st["stdout_matched"] += 1
        else:
            cat = categorise(a, b, res)
            st["stdout_misses"].append(where | {"category": cat, "diff": _first_diff(a, b)})


def _first_diff(a: str, b: str) -> dict[str, str]:
    la, lb = a.split("\n"), b.split("\n")
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return {"line": str(i), "ours": x[:160], "recorded": y[:160]}
    i = min(len(la), len(lb))
    return {"line": str(i), "ours": "\n".join(la[i:i + 2])[:160], "recorded": "\n".join(lb[i:i + 2])[:160]}


def _pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    a = np.asarray(values)
    return {f"p{q}": round(float(np.percentile(a, q)), 2) for q in (50, 90, 99)}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def frac(n: int, d: int) -> float | None:
        return round(n / d, 5) if d else None
    kinds, errs, cats = Counter(), Counter(), Counter()
    ms: list[float] = []
    for r in runs:
        kinds.update(r["kinds"])
        errs.update(r["error_kinds"])
        cats.update(m["category"] for m in r["stdout_misses"])
        ms += r["call_ms"]
    full = [r for r in runs if r["complete"]]
    counted = sum(r["counted"] for r in runs)
    compared = sum(r["stdout_compared"] for r in runs)
    return {"runs": len(runs), "runs_complete": len(full), "snippets": sum(r["snippets"] for r in runs),
            "snippets_counted": counted,
            "snippet_match": frac(sum(r["matched"] for r in runs), counted),
            "run_identical": frac(sum(r["identical"] for r in full), len(full)),
            "stdout_compared": compared,
            "stdout_match": frac(sum(r["stdout_matched"] for r in runs), compared),
            "call_ms": _pct(ms), "kinds": dict(kinds), "error_kinds": dict(errs.most_common(30)),
            "timeouts": {"recorded": sum(r["recorded_timeouts"] for r in runs),
                         "ours_cut_at_recorded_count": kinds.get("stopped", 0),
                         "ours_time_limit": kinds.get("timeout", 0)},
            "stdout_miss_categories": dict(cats)}


def load_traces(traces_dir: str | Path, only: list[str] | None = None,
                passes: list[int] | None = None) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    metas = [m for m in load_runs(traces_dir) if (not only or matches(m["game_id"], only))
             and (passes is None or m["pass"] in passes)]
    return [(m, sorted(load_trace(traces_dir, m["game_id"], m["pass"]), key=lambda t: t["turn_index"]))
            for m in metas]


def _job(args: tuple) -> dict[str, Any]:
    meta, turns, games, out, timeout = args
    try:
        return replay_run(meta, turns, games, out, timeout)
    except Exception as e:  # noqa: BLE001 - one broken run must not stop the others
        return {"game_id": meta["game_id"], "pass": meta["pass"], "failed": f"{type(e).__name__}: {e}"}


def run_replay(traces_dir: str, games_dir: str, out_dir: str, *, workers: int = 2,
               only: list[str] | None = None, passes: list[int] | None = None,
               timeout_s: float = 30.0) -> dict[str, Any]:
    out = Path(out_dir)
    (out / "records").mkdir(parents=True, exist_ok=True)
    jobs = [(m, t, str(games_dir), str(out), timeout_s) for m, t in load_traces(traces_dir, only, passes)]
    jobs.sort(key=lambda j: -sum(len(t["calls"]) for t in j[1]))  # longest first
    t0 = time.monotonic()
    if workers <= 1:
        runs = [_job(j) for j in jobs]
    else:
        with ProcessPoolExecutor(workers) as pool:
            runs = list(pool.map(_job, jobs))
    failed = [r for r in runs if "failed" in r]
    ok = sorted((r for r in runs if "failed" not in r), key=lambda r: (r["game_id"], r["pass"]))
    per_run = {f"{r['game_id']}_p{r['pass']}": {
        "snippet_match": round(r["matched"] / r["counted"], 4) if r["counted"] else None,
        "run_identical": r["identical"], "complete": r["complete"],
        "stdout_match": round(r["stdout_matched"] / r["stdout_compared"], 4) if r["stdout_compared"] else None,
        "call_ms": _pct(r["call_ms"]), "kinds": r["kinds"], "error_kinds": r["error_kinds"],
        "levels": r["levels"], "actions": r["actions"],
        "mismatches": r["mismatches"], "stdout_misses": r["stdout_misses"][:20]} for r in ok}
    doc = {"overall": summarise(ok) | {"failed_runs": len(failed), "wall_s": round(time.monotonic() - t0, 1)},
           "failed": failed, "runs": per_run}
    (out / "replay.json").write_text(json.dumps(doc, indent=1))
    return doc


def _main(args: argparse.Namespace) -> int:
    if args.through_agent:
        from devkit.replay.loop import replay_check  # (it starts the agent stack: only when asked)
        res = replay_check(args.traces_dir, args.games, args.out, args.only)
        print(json.dumps({k: v for k, v in res.items() if k != "games"} |
                         {"games": {g: {k: v[k] for k in ("pass", "recorded", "played", "known_share", "identical")}
                                    for g, v in res["games"].items()}}, indent=1))
        return 0 if res["identical"] == res["runs"] else 1
    doc = run_replay(args.traces_dir, args.games, args.out, workers=args.workers, only=args.only,
                     passes=args.passes, timeout_s=args.timeout)
    print(json.dumps(doc["overall"], indent=1))
    return 0 if not doc["failed"] else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("replay", help="replay Duck traces through the kernel (replay.json), or "
                              "with --through-agent through the whole agent loop (replay_loop.json)")
    p.add_argument("traces_dir", help="a duck-traces folder (runs.jsonl, turns/)")
    p.add_argument("--games", default="environment_files", help="environments folder with the games")
    p.add_argument("--out", required=True, help="run folder: replay.json and records/")
    p.add_argument("--through-agent", action="store_true",
                   help="the longest run of each game through the agent against a trace model (stub "
                        "server); compares the actions with the record; exit 1 unless all identical")
    p.add_argument("--workers", type=int, default=2, help="game-runs replayed in parallel")
    p.add_argument("--only", nargs="*", default=None, help="game ids or prefixes")
    p.add_argument("--passes", nargs="*", type=int, default=None,
                   help="only these passes of the traces (default: all)")
    p.add_argument("--timeout", type=float, default=30.0, help="per-call limit (the Duck's 30 s)")
    p.set_defaults(func=_main)

