"""`duck bench conversation`: what a conversation file costs, on disk and in time.

Replays the Duck's longest run of each public game (every Duck run lasted the full 45
minutes) through the whole agent loop against the stub server (devkit.replay.loop, as
`duck replay --through-agent`), which writes each game's conversation
(duck.play.conversation), and measures per game: requests, the file's size live (JSONL) and
finished (gzip), bytes per request, the time the writer took, and whether every request's
message list rebuilds from the file (images from the record).

The traces keep the length of the model's reasoning, not its text, so the replay's reasoning
is a repeated filler that gzip squeezes far better than prose. `gz_realistic_bytes` therefore
estimates the finished file with the reasoning compressed like the model's real visible text:
the gzip size of the file without the reasoning, plus the reasoning's characters divided by
the gzip ratio of the run's real prose (the replies' visible text). Prints JSON: per game and the
medians, and the median scaled to a Kaggle rerun: `--slot-hours` of play (9 h x 28 game
slots) in 45-minute units, the Duck's request rate per game (it ran 32 games per GPU).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from duck.paths import PUBLIC_GAMES, SHARED


def _timed_writer() -> dict[str, float]:
    """Wrap the writer's methods with a stopwatch (seconds per game id in `spent`)."""
    from duck.play.conversation import ConversationWriter
    spent: dict[str, float] = {}
    for name in ("message", "request", "reply", "error", "event", "notes", "begin", "close"):
        original = getattr(ConversationWriter, name)

        def timed(self: Any, *a: Any, _f: Any = original, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return _f(self, *a, **k)
            finally:
                key = self._start.get("game_id", "")
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t
        setattr(ConversationWriter, name, timed)
    return spent


def measure(path: Path, seconds_in_writer: float) -> dict[str, Any]:
    from duck.play.conversation import read_conversation, record_of
    from duck.play.record import read_record
    conv = read_conversation(path)
    raw = gzip.decompress(path.read_bytes())
    grids = dict(read_record(record_of(path)).grids())
    rebuilt = all(conv.request_messages(n, grids) for n in range(len(conv.requests)))
    reasoning = sum(len(ln["message"].get("reasoning") or "") for ln in conv.messages.values())
    real = "\n".join(ln["message"].get("content") or "" for ln in conv.messages.values()
                     if ln["message"].get("role") == "assistant").encode()  # the model's own prose
    ratio = len(real) / max(1, len(gzip.compress(real))) if real else 3.0
    stripped = []
    for line in raw.decode().splitlines():
        obj = json.loads(line)
        if obj.get("type") == "message":
            obj["message"].pop("reasoning", None)
        stripped.append(json.dumps(obj, separators=(",", ":")))
    without = len(gzip.compress("\n".join(stripped).encode()))
    n = max(1, len(conv.requests))
    return {"requests": len(conv.requests), "messages": len(conv.messages), "raw_bytes": len(raw),
            "gz_bytes": path.stat().st_size, "gz_realistic_bytes": int(without + reasoning / ratio),
            "raw_bytes_per_request": round(len(raw) / n), "reasoning_chars": reasoning,
            "text_gzip_ratio": round(ratio, 2), "writer_ms_total": round(1000 * seconds_in_writer, 1),
            "writer_ms_per_request": round(1000 * seconds_in_writer / n, 3), "rebuilt": rebuilt}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="duck bench conversation", description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=str(SHARED / "duck-traces"))
    p.add_argument("--games", default=str(PUBLIC_GAMES))
    p.add_argument("--only", nargs="*", default=None, help="game ids or 4-letter prefixes")
    p.add_argument("--out", default=None, help="run folder (default: a temp folder)")
    p.add_argument("--slot-hours", type=float, default=9 * 28, help="game-slot hours of a Kaggle rerun")
    p.add_argument("--turns", type=int, default=None, help="replay only the first N recorded turns of each run")
    args = p.parse_args(argv)
    if args.turns is not None and args.turns < 1:
        p.error("--turns must be at least 1")
    spent = _timed_writer()
    from devkit.replay.loop import replay_check  # (after the stopwatch is in place)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_conversation_"))
    t0 = time.monotonic()
    result = replay_check(args.traces, args.games, out, only=args.only, turns=args.turns)
    games = {g: measure(out / "conversations" / f"{g}.jsonl.gz", spent.get(g, 0.0)) | {
        "actions": v["played"], "identical": v["identical"]} for g, v in result["games"].items()}

    def med(key: str) -> float:
        return statistics.median(v[key] for v in games.values())
    doc = {"games": len(games), "replay_s": round(time.monotonic() - t0, 1),
           "all_rebuilt": all(v["rebuilt"] for v in games.values()),
           "actions_identical": sum(v["identical"] for v in games.values()),
           "median": {k: med(k) for k in ("requests", "raw_bytes", "gz_bytes", "gz_realistic_bytes",
                                          "raw_bytes_per_request", "writer_ms_total", "writer_ms_per_request")},
           "max_raw_bytes": max(v["raw_bytes"] for v in games.values()),
           "max_gz_realistic_bytes": max(v["gz_realistic_bytes"] for v in games.values()),
           "sum_raw_bytes": sum(v["raw_bytes"] for v in games.values()),
           "sum_gz_bytes": sum(v["gz_bytes"] for v in games.values())}
    units = args.slot_hours / 0.75  # 45-minute game runs
    doc["kaggle_rerun"] = {"slot_hours": args.slot_hours, "gz_realistic_mb": round(units * doc["median"]["gz_realistic_bytes"] / 1e6, 1),
                           "raw_mb": round(units * doc["median"]["raw_bytes"] / 1e6, 1)}
    doc["per_game"] = games
    doc["out"] = str(out)
    print(json.dumps(doc, indent=1))
    return 0
