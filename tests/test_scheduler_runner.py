"""The concurrent runner: virtual-clock schedules, and real bundled games end to end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from duck.config import AdaptiveConfig
from duck.testing.scheduler_fakes import ScriptedWorker
from scheduler.clock import VirtualClock
from scheduler.policy import AdaptivePolicy, FixedPolicy
from scheduler.runner import run_schedule

BUNDLED = Path(__file__).resolve().parent / "games"


def _events(worker, what):
    return {g: t for g, w, t in worker.log if w == what}


def test_fixed_on_a_virtual_clock(tmp_path):
    clock = VirtualClock()
    worker = ScriptedWorker(clock, {"a": [100, 200], "b": [5000], "c": [50]}, step_s=10)
    ids = ["a", "b", "c", "d", "e"]
    t = time.monotonic()
    res = run_schedule(FixedPolicy(), ids, slots=2, budget_s=3000, worker=worker, clock=clock,
                       records_dir=tmp_path)
    assert time.monotonic() - t < 5, "virtual hours must take real milliseconds"
    starts, ends = _events(worker, "start"), _events(worker, "end")
    # 5 games on 2 slots: 3 waves of min(3000*2/5, 3000/3) = 1000 s.
    assert starts == {"a": 0, "b": 0, "c": 1000, "d": 1000, "e": 2000}
    for gid, g in res.games.items():
        assert ends[gid] <= g.deadline + 1e-9 and g.ended_at <= g.deadline + 1e-9
        assert g.result.end_reason in ("deadline", "stopped")  # fixed also stops it then
    assert res.games["a"].result.levels == 2 and res.games["b"].result.levels == 0
    assert res.last_end <= 3000


def test_adaptive_fresh_starts_a_stalled_game_then_stops_it_at_its_share(tmp_path):
    clock = VirtualClock()
    # "stuck" never levels; "next" waits in the queue. share = (4000 - 300) / 2 = 1850 s.
    worker = ScriptedWorker(clock, {"stuck": [10**6], "next": [300]}, step_s=10)
    pol = AdaptivePolicy(AdaptiveConfig(stall_s=900, min_play_s=900), margin_s=300)
    res = run_schedule(pol, ["stuck", "next"], slots=1, budget_s=4000, worker=worker, clock=clock,
                       records_dir=tmp_path)
    fresh, starts, ends = _events(worker, "fresh"), _events(worker, "start"), _events(worker, "end")
    assert fresh["stuck"] == pytest.approx(900, abs=10)
    assert ends["stuck"] == pytest.approx(1850, abs=20)  # its share: the queue gets the slot
    assert res.games["stuck"].result.end_reason == "stopped"
    assert starts["next"] == pytest.approx(ends["stuck"], abs=1e-6)
    assert ends["next"] <= 4000 - 300  # the margin holds
    assert res.games["next"].result.levels >= 1
    assert res.games["stuck"].state.fresh_starts == 1


def test_every_game_is_started_and_no_deadline_is_passed(tmp_path):
    clock = VirtualClock()
    plans = {f"g{i}": [150.0 * (i % 4 + 1)] * (i % 3) for i in range(13)}
    worker = ScriptedWorker(clock, plans, step_s=7)
    for pol in (FixedPolicy(), AdaptivePolicy(margin_s=120)):
        res = run_schedule(pol, list(plans), slots=3, budget_s=5400, worker=worker, clock=clock,
                           records_dir=tmp_path)
        assert all(g.state.started_at is not None for g in res.games.values())
        assert all(g.ended_at <= g.deadline + 1e-9 <= 5400 + 1e-9 for g in res.games.values())
        clock = VirtualClock()
        worker = ScriptedWorker(clock, plans, step_s=7)


@pytest.mark.parametrize("name", ["fixed", "adaptive"])
def test_bundled_games_random_policy_respect_deadlines(tmp_path, name):
    from duck.game.source import GameSource
    from duck.policies import make_policy as make_play_policy

    source = GameSource.offline(BUNDLED)
    ids = [g.game_id for g in source.games()]
    assert len(ids) >= 3
    budget = 2.4
    if name == "fixed":
        pol = FixedPolicy()
    else:
        pol = AdaptivePolicy(AdaptiveConfig(stall_s=0.5, min_play_s=0.3), margin_s=0.4)
    res = run_schedule(pol, ids, slots=2, budget_s=budget, source=source,
                       play_policy=lambda gid: make_play_policy("random", 0),
                       max_actions=10**6, records_dir=tmp_path / "records", max_poll_s=0.05)
    source.close()
    for gid, g in res.games.items():
        assert g.state.started_at is not None, f"{gid} never started"
        assert g.result is not None and g.result.error is None, g.result
        assert g.result.end_reason in ("deadline", "stopped", "won")
        # No action after the deadline (the record's clock starts when the game is made,
        # just after the runner's start time, so this reads slightly in the game's favour
        # by a few ms only). An action's time is stamped when it ends: one begun just before
        # the deadline may end after it, by up to one step (seen: 21 ms on a loaded 2-core
        # box; the random policy otherwise plays ~1 action per ms, so a runner that ignored
        # the deadline would overshoot by far more than 50 ms).
        lines = [json.loads(x) for x in (tmp_path / "records" / f"{gid}.jsonl").read_text().splitlines()]
        acts = [x["t"] for x in lines if x.get("type") == "action"]
        assert lines[-1]["type"] == "end"  # the record is closed
        assert not acts or max(acts) <= g.deadline - g.state.started_at + 0.05, (gid, max(acts))
        # ... and the worker returns promptly (loose: the test box is shared).
        assert g.ended_at <= g.deadline + 1.0, (gid, g.ended_at, g.deadline)
    assert res.last_end <= budget + 1.0
