"""`python -m duck.bench context`: prefix stability and harness time of the agent loop.

Replays one recorded 45-minute Duck game through the full loop: the stub server's trace
model answers each request with the recorded response (its text, reasoning of the recorded
length, its Python), the real kernel runs the code on the real game, and the context is
kept under `--budget` tokens (default 32K). Prints, as JSON:

* `prefix_share_mean`: the mean, over requests after the first, of the share of each
  request's rendered prompt (the real Qwen3.6 chat template as vLLM 0.19 applies it,
  duck.testing.stub.render; `chat_template` in the output says which file) that is
  a prefix of the previous request's prompt, i.e. what a prefix cache can reuse;
* `cache_share_mean`: the same against the previous prompt plus the reply generated for
  it, which is what vLLM's prefix cache holds (its generated tokens are cached too);
* `harness_ms_median`: the median time per turn spent outside the model server: building
  the user message (PNG included), fitting the context, parsing, the notes, the kernel
  calls and the game steps (everything but the HTTP model requests);
* `loop_ms_median`: the same without the kernel calls (the agent's own bookkeeping);
* counts, evictions, token peaks, and whether the actions equal the recorded ones.
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



def _pick_run(traces: Path, game: str | None, pass_: int | None) -> tuple[str, int]:
    from duck.testing.stub.traces import load_trace, recorded_actions
    runs = [json.loads(line) for line in open(traces / "runs.jsonl")]
    if game and pass_ is not None:
        return next(r["game_id"] for r in runs if r["game_id"].startswith(game)), pass_
    cands = [r for r in runs if not game or r["game_id"].startswith(game)]
    for r in sorted(cands, key=lambda r: (-r["n_model_responses"], r["game_id"], r["pass"])):
        if recorded_actions(load_trace(traces, r["game_id"], r["pass"]), r) is not None:
            return r["game_id"], r["pass"]
    raise SystemExit("no run with complete action lists")


def run(traces: Path, games: Path, game: str, pass_: int, budget: int, preserve_thinking: bool | None,
        out: Path, overrides: list[str] = (), turns_limit: int | None = None) -> dict[str, Any]:
    import duck.agent.loop as agent_module
    from duck.agent.loop import AgentPolicy
    from duck.agent.turn import turn_message
    from duck.config import load_config
    from duck.game.source import GameSource
    from duck.play.session import play_game
    from duck.play.record import read_record
    from duck.testing.stub.server import StubServer
    from duck.lab.replay_loop import ReplayKernel
    from duck.lab.replay_caps import trace_caps
    from duck.testing.stub.models import TraceModel
    from duck.testing.stub.traces import load_trace, recorded_actions

    turns = load_trace(traces, game, pass_)[:turns_limit]
    run_info = next(json.loads(line) for line in open(traces / "runs.jsonl")
                    if json.loads(line)["game_id"] == game and json.loads(line)["pass"] == pass_)
    expected = recorded_actions(turns, run_info if turns_limit is None else None)
    cfg = load_config(overrides=[f"agent.context_tokens={budget}", "agent.fallback=null", "model.retries=0",
                                 "agent.failures_before_fallback=1", *overrides])
    cfg.model.preserve_thinking = preserve_thinking
    timings: list[dict[str, float]] = []

    def timed_turn_message(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return turn_message(*a, **k)
        finally:
            timings.append({"user": time.perf_counter() - t, "turn": 0.0, "model": 0.0, "kernel": 0.0})

    class Timed(AgentPolicy):
        """The agent with stopwatches around its parts (the loop itself is unchanged)."""

        def _turn(self, session: Any, kernel: Any, turn: int) -> Any:
            if not getattr(self, "_wrapped", False):
                self._wrapped = True
                chat, krun = self.client.chat, kernel.run

                def timed_chat(*a: Any, **k: Any) -> Any:
                    t = time.perf_counter()
                    try:
                        return chat(*a, **k)
                    finally:
                        timings[-1]["model"] += time.perf_counter() - t

                def timed_run(*a: Any, **k: Any) -> Any:
                    t = time.perf_counter()
                    try:
                        return krun(*a, **k)
                    finally:
                        timings[-1]["kernel"] += time.perf_counter() - t
                self.client.chat, kernel.run = timed_chat, timed_run
            t = time.perf_counter()
            try:
                return super()._turn(session, kernel, turn)
            finally:
                timings[-1]["turn"] += time.perf_counter() - t

    source = GameSource.offline(games)
    server = StubServer(TraceModel(turns))
    record_path = out / "records" / f"{game}.jsonl"
    record_path.parent.mkdir(parents=True, exist_ok=True)
    if record_path.exists():
        record_path.unlink()
    t0 = time.monotonic()
    agent_module.turn_message = timed_turn_message  # the turn's user message, PNG included
    try:
        with server as url:
            caps = trace_caps(turns)
            policy = Timed(0, cfg, model_url=url, pass_=pass_,
                           kernel_factory=lambda session, kcfg: ReplayKernel(session, kcfg, caps))
            result = play_game(source, game, policy, max_actions=len(expected) if expected else 10_000,
                               record_path=record_path, pass_=pass_)
    finally:
        agent_module.turn_message = turn_message
    if result.error:
        raise SystemExit(f"the replay failed: {result.error}")
    wall = time.monotonic() - t0
    shares = [r["prefix_share"] for r in server.requests if r["prefix_share"] is not None]
    cache = [r["cache_share"] for r in server.requests if r["cache_share"] is not None]
    harness = [1000 * (t["user"] + t["turn"] - t["model"]) for t in timings]
    loop = [1000 * (t["user"] + t["turn"] - t["model"] - t["kernel"]) for t in timings]
    kernel = [1000 * t["kernel"] for t in timings]
    got = [a["action"] for a in read_record(record_path).actions]
    return {
        "game": game, "pass": pass_, "budget_tokens": budget, "preserve_thinking": preserve_thinking,
        "chat_template": str(server.template.path) if server.template.real else "approximation (template absent)",
        "requests": len(server.requests), "turns": len(timings), "evictions": policy.ctx.evictions,
        "prompt_tokens_max": max(r["prompt_tokens"] for r in server.requests),
        "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] for r in server.requests)),
        "prefix_share_mean": round(statistics.mean(shares), 4),
        "prefix_share_median": round(statistics.median(shares), 4),
        "prefix_share_min": round(min(shares), 4),
        "cache_share_mean": round(statistics.mean(cache), 4),
        "harness_ms_median": round(statistics.median(harness), 2),
        "harness_ms_p90": round(statistics.quantiles(harness, n=10)[-1], 2),
        "loop_ms_median": round(statistics.median(loop), 2),
        "kernel_ms_median": round(statistics.median(kernel), 2),
        "actions": len(got), "recorded_actions": len(expected) if expected else None,
        "actions_identical": got == expected, "levels": result.levels, "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m duck.bench context", description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=str(SHARED / "duck-traces"))
    p.add_argument("--games", default=str(PUBLIC_GAMES))
    p.add_argument("--game", default=None, help="game id or prefix (default: the run with the most requests)")
    p.add_argument("--pass", dest="pass_", type=int, default=None)
    p.add_argument("--budget", type=int, default=32768)
    p.add_argument("--preserve-thinking", choices=["true", "false", "default"], default="true")
    p.add_argument("--out", default=None, help="run folder for the record (default: a temp folder)")
    p.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. agent.evict_to=0.4")
    p.add_argument("--turns", type=int, default=None, help="replay only the first N recorded turns")
    args = p.parse_args(argv)
    traces = Path(args.traces)
    game, pass_ = _pick_run(traces, args.game, args.pass_)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_context_"))
    keep = {"true": True, "false": False, "default": None}[args.preserve_thinking]
    print(json.dumps(run(traces, Path(args.games), game, pass_, args.budget, keep, out, args.set, args.turns),
                     indent=1))
    return 0
