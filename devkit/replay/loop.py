"""`duck replay --through-agent`: replay the Duck's longest run of each public game through the
full agent loop against a trace model (the stub server), and compare the actions with the record.

The Duck's slow sandbox cut many action loops at 30 s; each recorded call's action count says
where. A live model must never be able to cap its own calls, so the caps are not in the tool
calls: the replay's kernel (devkit.replay.caps.ReplayKernel) gives each snippet it runs the
cap of its recorded call, matching snippets to the recorded calls in order.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from duck.config import load_config
from duck.game.source import GameSource, matches
from devkit.replay.caps import ReplayKernel, trace_caps
from duck.play.record import read_record
from duck.play.session import play_game
from duck.policies import make_policy
from devkit.stub.models import TraceModel
from devkit.stub.server import StubServer
from devkit.stub.traces import load_runs, load_trace, recorded_actions, same_actions

log = logging.getLogger(__name__)


def replay_check(traces: str | Path, games_dir: str | Path, out: str | Path,
                 only: list[str] | None = None, turns: int | None = None) -> dict[str, Any]:
    """Play the longest Duck run of each game (most actions) through the agent against a
    trace model and compare the actions with the record; writes `out/replay_loop.json`.

    Where the record lists only the first names of a call's actions (runs without an events
    file), the unknown positions match anything and `known_share` says how much was checked.
    `turns`: only the first this many recorded turns of each run (a short check)."""
    cfg = load_config(overrides=["agent.fallback=null"])
    source = GameSource.offline(games_dir)
    have = {g.game_id for g in source.games()}
    all_runs = load_runs(traces)
    result: dict[str, Any] = {"games": {}}
    for game_id in sorted({r["game_id"] for r in all_runs}):
        if game_id not in have or (only and not matches(game_id, only)):
            continue
        run = min((r for r in all_runs if r["game_id"] == game_id), key=lambda r: (-r["actions"], r["pass"]))
        recorded = load_trace(traces, game_id, run["pass"])[:turns]
        expected = recorded_actions(recorded, run if turns is None else None, partial=True)
        t0 = time.monotonic()
        record_path = Path(out, "records", f"{game_id}.jsonl")
        record_path.parent.mkdir(parents=True, exist_ok=True)
        if record_path.exists():
            record_path.unlink()
        caps = trace_caps(recorded)
        with StubServer(TraceModel(recorded)) as url:
            policy = make_policy("llm", 0, config=cfg, model_url=url, pass_=run["pass"],
                                 kernel_factory=lambda session, kcfg: ReplayKernel(session, kcfg, caps))
            play_game(source, game_id, policy, max_actions=len(expected), record_path=record_path,
                      pass_=run["pass"])
        record = read_record(record_path)
        got = [a["action"] for a in record.actions]
        diff = same_actions(got, expected)
        known = sum(a is not None for a in expected)
        result["games"][game_id] = {"pass": run["pass"], "recorded": len(expected), "played": len(got),
                                    "known_share": round(known / max(1, len(expected)), 4),
                                    "identical": diff is None, "first_difference": diff,
                                    "levels": record.end["levels"] if record.end else None,
                                    "recorded_levels": run["levels_completed"],
                                    "seconds": round(time.monotonic() - t0, 1)}
        log.info("%s pass %d: %s", game_id, run["pass"], result["games"][game_id])
    g = result["games"]
    result["runs"] = len(g)
    result["identical"] = sum(v["identical"] for v in g.values())
    result["levels_equal"] = sum(v["levels"] == v["recorded_levels"] for v in g.values())
    result["known_share"] = round(sum(v["known_share"] * v["recorded"] for v in g.values())
                                  / max(1, sum(v["recorded"] for v in g.values())), 4)
    result["actions_recorded"] = sum(v["recorded"] for v in g.values())
    result["actions_matched_before_first_difference"] = sum(
        v["recorded"] if v["identical"] else v["first_difference"] for v in g.values())
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, "replay_loop.json").write_text(json.dumps(result, indent=1))
    return result
