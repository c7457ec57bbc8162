"""`duck bench context`: the context at the field's scale against the old settings, in one run.

Two arms, side by side: `new`, the defaults (the Flash-Next plan's 131,072-token budget, trims
to 0.45 of it, no summary, the server's token counts, a cut reply's thinking cut to its tail),
and `old` (`OLD` below: a 32K budget, eviction to half, cut replies kept whole). Each arm
replays the Duck's recorded games (../shared/duck-traces: per game its complete run with the
most requests, `--runs` of them) through the full agent loop: the stub server's trace model
answers, the real kernel runs the code on the real game, the prompt is rendered with the
Qwen3.8 template and counted by the stub's stand-in tokenizer. Then a long synthetic game
(`--synthetic-hours`, devkit.bench.context_measure) shows the same at 128K, where the Duck's
45-minute games rarely trim. Prints JSON per arm (context_measure.summarise_rows): the prefix
and cache shares, trims and re-prefilled tokens, the harness time per turn, and whether the
actions equal the recorded ones; each field: docs/workbench.md, "The context bench".
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from duck.paths import PUBLIC_GAMES, SHARED

# The old context settings (experiments/context/old-32k-summary.toml holds the same).
OLD = ["agent.context_tokens=32768", "agent.evict_to=0.5", "model.cut_thinking_chars=0"]


def pick_runs(traces: Path, game: str | None, n: int | None) -> list[tuple[str, int]]:
    """Per game, its complete run (every action list known) with the most model requests; the
    `n` longest of those (all 25 by default), or the one of `game` (an id or prefix)."""
    from devkit.stub.traces import load_runs, load_trace, recorded_actions
    runs = load_runs(traces)
    best: dict[str, tuple[int, int]] = {}
    for r in sorted(runs, key=lambda r: (-r["n_model_responses"], r["game_id"], r["pass"])):
        g = r["game_id"]
        if g in best or (game and not g.startswith(game)):
            continue
        if recorded_actions(load_trace(traces, g, r["pass"]), r) is not None:
            best[g] = (r["pass"], r["n_model_responses"])
    if not best:
        raise SystemExit("no run with complete action lists")
    ordered = sorted(best.items(), key=lambda kv: (-kv[1][1], kv[0]))
    return [(g, p) for g, (p, _) in ordered[:n]]


def _timed_agent(timings: list[dict[str, float]]) -> type:
    """The agent with stopwatches around its parts, adding to `timings[-1]` (one dict per
    turn, started by the timed turn message): the turn, the model requests and the kernel
    calls inside it. The loop itself is unchanged."""
    from duck.agent.loop import AgentPolicy

    def timed(f: Any, key: str) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                timings[-1][key] += time.perf_counter() - t
        return call

    class Timed(AgentPolicy):
        def _turn(self, session: Any, kernel: Any, turn: int, *rest: Any) -> Any:
            if not getattr(self, "_wrapped", False):
                self._wrapped = True
                self.client.chat, kernel.run = timed(self.client.chat, "model"), timed(kernel.run, "kernel")
            return timed(super()._turn, "turn")(session, kernel, turn, *rest)
    return Timed


def replay(traces: Path, games: Path, game: str, pass_: int, cfg: Any, out: Path,
           turns_limit: int | None = None) -> dict[str, Any]:
    """One recorded game through the agent loop under `cfg`; its numbers (see the module docstring)."""
    import duck.agent.loop as agent_module
    from duck.agent.turn import turn_message
    from devkit.bench.context_measure import MeasuringServer, summarise_rows
    from duck.game.source import GameSource
    from devkit.replay.caps import ReplayKernel, trace_caps
    from duck.play.record import read_record
    from duck.play.session import play_game
    from devkit.stub.models import TraceModel
    from devkit.stub.traces import load_runs, load_trace, recorded_actions

    turns = load_trace(traces, game, pass_)[:turns_limit]
    run_info = next(r for r in load_runs(traces) if r["game_id"] == game and r["pass"] == pass_)
    expected = recorded_actions(turns, run_info if turns_limit is None else None)
    timings: list[dict[str, float]] = []

    def timed_turn_message(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return turn_message(*a, **k)
        finally:
            timings.append({"user": time.perf_counter() - t, "turn": 0.0, "model": 0.0, "kernel": 0.0})

    server = MeasuringServer(TraceModel(turns))
    record_path = out / "records" / f"{game}.jsonl"
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    agent_module.turn_message = timed_turn_message  # the turn's user message, PNG included
    try:
        with server as url:
            caps = trace_caps(turns)
            policy = _timed_agent(timings)(0, cfg, model_url=url, pass_=pass_,
                                           kernel_factory=lambda session, kcfg: ReplayKernel(session, kcfg, caps))
            result = play_game(GameSource.offline(games), game, policy, record_path=record_path, pass_=pass_,
                               max_actions=len(expected) if expected else 10_000)
    finally:
        agent_module.turn_message = turn_message
    if result.error:
        raise SystemExit(f"the replay of {game} pass {pass_} failed: {result.error}")
    got = [a["action"] for a in read_record(record_path).actions]
    trims = len(policy.ctx.trims)
    return {"game": game, "pass": pass_, "turns": len(timings), "trims": trims,
            "turns_dropped_as_too_long": policy.ctx.evictions - trims,
            **summarise_rows(server.rows, trims), "rows": server.rows,
            "harness_ms": [1000 * (t["user"] + t["turn"] - t["model"]) for t in timings],
            "loop_ms": [1000 * (t["user"] + t["turn"] - t["model"] - t["kernel"]) for t in timings],
            "actions": len(got), "actions_identical": got == expected, "levels": result.levels,
            "wall_s": round(time.monotonic() - t0, 1)}


def arm(per_game: list[dict[str, Any]], cfg: Any) -> dict[str, Any]:
    """The games of one arm, pooled."""
    from devkit.bench.context_measure import summarise_rows
    rows = [r for g in per_game for r in g["rows"]]
    trims = sum(g["trims"] for g in per_game)
    harness = [x for g in per_game for x in g["harness_ms"]]
    loop = [x for g in per_game for x in g["loop_ms"]]
    n = len(per_game)
    pooled = summarise_rows(rows, trims)
    return {"budget_tokens": cfg.agent.context_tokens, "output_cap": cfg.model.max_output_tokens,
            "low_water": cfg.agent.evict_to,
            "cut_thinking_chars": cfg.model.cut_thinking_chars, "games": n, **pooled,
            "trims_per_game": round(trims / n, 2), "games_with_a_trim": sum(g["trims"] > 0 for g in per_game),
            "reprefill_tokens_per_game": round(pooled["reprefill_tokens"] / n),
            "prefill_tokens_per_game": round(pooled["prefill_tokens"] / n),
            "harness_ms_per_turn_median": round(statistics.median(harness), 2),
            "loop_ms_per_turn_median": round(statistics.median(loop), 2),
            "actions_identical": round(sum(g["actions_identical"] for g in per_game) / n, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="duck bench context", description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=str(SHARED / "duck-traces"))
    p.add_argument("--games", default=str(PUBLIC_GAMES))
    p.add_argument("--game", default=None, help="only this game (id or prefix)")
    p.add_argument("--runs", type=int, default=None,
                   help="the N games with the longest runs (default: all 25; 0: none, the synthetic game only)")
    p.add_argument("--turns", type=int, default=None, help="replay only the first N recorded turns of each run")
    p.add_argument("--budget", type=int, default=None, help="the new arm's budget (default: the plan's, 131072)")
    p.add_argument("--old-budget", type=int, default=32768, help="the old arm's budget")
    p.add_argument("--synthetic-hours", type=float, default=3.0, help="hours of the long synthetic game (0: none)")
    p.add_argument("--out", default=None, help="run folder for the records (default: a temp folder)")
    p.add_argument("--set", nargs="*", default=[], help="config overrides for both arms, e.g. kernel.call_timeout_s=20")
    args = p.parse_args(argv)
    if (args.runs is not None and args.runs < 0) or (args.turns is not None and args.turns < 1):
        p.error("--runs must be at least 0 and --turns at least 1")
    from devkit.bench.context_measure import synthetic_game
    from duck.config import load_config
    from duck.llm.render import default_template

    traces = Path(args.traces)
    runs = pick_runs(traces, args.game, args.runs) if args.runs != 0 else []  # (0: no traces needed)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_context_"))
    base = ["agent.fallback=null", "model.retries=0", "agent.failures_before_fallback=1", *args.set]
    arms = {"new": base + ([f"agent.context_tokens={args.budget}"] if args.budget else []),
            "old": base + [o for o in OLD if not o.startswith("agent.context_tokens")]
            + [f"agent.context_tokens={args.old_budget}"]}
    t0 = time.monotonic()
    result: dict[str, Any] = {"chat_template": str(default_template().path) if default_template().real
                              else "approximation (template absent)",
                              "tokenizer": "stand-in (devkit.stub.tokenizer; FIELD §3 chars/token by kind)",
                              "runs": [[g, p_] for g, p_ in runs], "traces": {}, "per_game": []}
    per_game: dict[str, list[dict[str, Any]]] = {}
    for name, overrides in arms.items():
        cfg = load_config(overrides=overrides)
        per_game[name] = [replay(traces, Path(args.games), g, p_, cfg, out / name, args.turns) for g, p_ in runs]
        if runs:
            result["traces"][name] = arm(per_game[name], cfg)
    for k, (g, p_) in enumerate(runs):
        result["per_game"].append({"game": g, "pass": p_, **{
            name: {key: per_game[name][k][key] for key in ("requests", "trims", "prompt_tokens_max", "prefix_share_mean",
                                                            "cache_share_mean", "reprefill_tokens", "actions_identical")}
            for name in arms}})
    if args.synthetic_hours > 0:
        result["synthetic"] = {name: synthetic_game(load_config(overrides=overrides), args.synthetic_hours)
                               for name, overrides in arms.items()}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result, indent=1))
    return 0
