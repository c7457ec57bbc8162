"""How the notebook reaches and plays the games: the wait for the rerun's gateway, the
scheduler's runner, and the plain pool that plays whatever the runner never started; both end
by the deadline plus the stop grace, so a hung game cannot hold up the scorecard's closing.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from duck.config import Config
from duck.game.source import GameSource
from duck.play.session import GameResult, play_game
from scheduler.policy import FixedPolicy, make_policy
from scheduler.runner import Runner

log = logging.getLogger("duck.kaggle.run")  # the notebook shows this logger's INFO lines


def wait_for_gateway(url: str, timeout_s: float, api_key: str = "", poll_s: float = 2.0) -> list[dict]:
    """Poll `GET {url}/api/games` until it lists games; raises TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    last: Any = None
    while True:
        try:
            req = urllib.request.Request(url.rstrip("/") + "/api/games",
                                         headers={"X-API-Key": api_key} if api_key else {})
            with urllib.request.urlopen(req, timeout=10) as r:
                games = json.loads(r.read())
            if isinstance(games, list) and games:
                return games
            last = f"an empty game list ({games!r:.80})"
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the gateway at {url} did not list games in {timeout_s:.0f} s (last: {last})")
        time.sleep(min(poll_s, max(0.05, deadline - time.monotonic())))


def scheduler_runner(cfg: Config, source: GameSource, play_policy: Callable[[str], Any],
                     records_dir: Path, deadline: float) -> Runner:
    """scheduler.runner.Runner under the configured policy, its budget what is left until the
    games' deadline (the margin, `kaggle.margin_s`, already taken); at most `scheduler.slots`
    (the serving plan's: 10 for flash-next at 128K) hold a model-server slot at once."""
    return Runner(make_policy(cfg.scheduler.policy, cfg.scheduler), slots=cfg.scheduler.slots,
                  budget_s=max(0.0, deadline - time.time()), source=source, play_policy=play_policy,
                  max_actions=cfg.play.max_actions, records_dir=records_dir,
                  worker=functools.partial(play_game, conversation=cfg.play.conversations))


def run_scheduler(runner: Runner, game_ids: list[str], deadline: float,
                  grace_s: float) -> dict[str, dict[str, Any]]:
    """Run `runner` here (a plain blocking call, fine inside a notebook cell), giving up on a
    worker not returned `grace_s` after `deadline`; the started games' results."""
    runner.budget_s = min(runner.budget_s, max(0.0, deadline - time.time()))  # from now on
    runner.grace_s = grace_s
    summary = runner.run(game_ids).summary()
    log.info("runner: %d slots, at most %d held at once, idle slot share %.3f", summary["slots"],
             summary["max_holding"], summary["idle_slot_share"])
    out = {}
    for g, r in summary["games"].items():
        if r.get("started_at") is not None:
            out[g] = {k: r[k] for k in ("levels", "actions", "end_reason", "error") if r.get(k) is not None}
            out[g]["score"] = round(r.get("score") or 0.0, 4)
    return out


def run_pool(cfg: Config, source: GameSource, game_ids: list[str], play_policy: Callable[[str], Any],
             record_path: Callable[[str], Path], deadline: float, mode: str) -> dict[str, dict[str, Any]]:
    """A plain runner: `scheduler.slots` games at a time, each with the Duck's equal share of
    what is left (scheduler.policy.FixedPolicy's), all stopped at the deadline."""
    slots = min(cfg.scheduler.slots, len(game_ids))
    left = max(0.0, deadline - time.time())
    allot = FixedPolicy(cfg.scheduler.fixed).allotment(left, slots, len(game_ids))
    stop = threading.Event()
    end_mono = time.monotonic() + left
    results: dict[str, dict[str, Any]] = {}

    def one(game_id: str) -> None:
        if stop.is_set() or time.monotonic() >= end_mono:
            results[game_id] = {"end_reason": "not_started", "levels": 0, "actions": 0}
            return
        game_deadline = min(time.monotonic() + allot, end_mono)
        r = play_game(source, game_id, play_policy(game_id), max_actions=cfg.play.max_actions,
                      record_path=record_path(game_id), stop=stop, deadline=game_deadline,
                      seed=cfg.play.seed, config={"runner": "pool", "mode": mode},
                      conversation=cfg.play.conversations)
        results[game_id] = _result_dict(r)
        log.info("%s: %s", game_id, results[game_id])

    pool = ThreadPoolExecutor(max_workers=max(1, slots), thread_name_prefix="duck-game")
    futures = [pool.submit(one, g) for g in game_ids]
    for f in futures:
        try:
            f.result(timeout=max(0.0, end_mono - time.monotonic()) + cfg.kaggle.stop_grace_s)
        except Exception as e:  # a hung worker or a bug: stop the rest, keep what we have
            log.error("a game worker did not finish: %r", e)
            stop.set()
    stop.set()
    pool.shutdown(wait=False, cancel_futures=True)
    for g in game_ids:
        results.setdefault(g, {"end_reason": "unfinished", "levels": 0, "actions": 0})
    return results


def _result_dict(r: GameResult) -> dict[str, Any]:
    return {"levels": r.levels, "actions": r.actions, "score": round(r.score, 4),
            "end_reason": r.end_reason, "state": r.state, **({"error": r.error} if r.error else {})}
