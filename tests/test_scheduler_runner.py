"""The slot-gated runner: virtual-clock schedules, real bundled games, and the real agent
against the stub server (trims and level changes are its yield points)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from duck.config import AdaptiveConfig, SchedulerConfig
from scheduler.clock import VirtualClock
from scheduler.policy import FixedPolicy, make_policy
from scheduler.runner import run_schedule

from scheduler_fakes import ScriptedWorker

BUNDLED = Path(__file__).resolve().parent / "games"
GATES = ["field", "ucb", "adaptive"]
YIELDS = {"trim", "level", "preempted", "end"}


def holds(res, gid):
    """[(grant, release)] of one game, from the runner's timeline."""
    out, start = [], None
    for t, g, what, _ in res.timeline:
        if g != gid:
            continue
        if what == "grant":
            start = t
        else:
            out.append((start, t))
            start = None
    if start is not None:
        out.append((start, res.last_end))
    return out


def check_slots(res, slots):
    """At most `slots` games hold one at any time; grants and releases alternate per game."""
    assert max(n for _, n in res.holding()) <= slots
    for gid in res.games:
        kinds = [w for _, g, w, _ in res.timeline if g == gid]
        assert all(a != b for a, b in zip(kinds, kinds[1:])), (gid, kinds)
    assert {why for _, _, w, why in res.timeline if w == "release"} <= YIELDS


@pytest.mark.parametrize("name", GATES)
def test_slots_never_exceeded_every_game_played_deadline_holds(tmp_path, name):
    clock = VirtualClock()
    plans = {f"g{i}": [20_000 * (i % 3 + 1)] * (i % 4) for i in range(23)}
    worker = ScriptedWorker(clock, plans, step_s=10, tokens_per_step=1500, trim_tokens=30_000,
                            total_levels={g: 5 for g in plans})
    t = time.monotonic()
    res = run_schedule(make_policy(name, SchedulerConfig(slots=4), margin_s=100), list(plans), slots=4,
                       budget_s=6000, worker=worker, clock=clock, records_dir=tmp_path)
    assert time.monotonic() - t < 20, "virtual hours must take real seconds at most"
    check_slots(res, 4)
    assert all(g.state.started_at is not None for g in res.games.values())  # every game played
    ends = {g: t for g, w, t in worker.log if w == "end"}
    steps = [(g, t) for g, w, t in worker.log if w == "step"]
    for gid, g in res.games.items():
        assert g.deadline <= 5900 + 1e-9  # the margin
        assert ends[gid] <= g.deadline + 1e-9 and g.ended_at <= g.deadline + 1e-9
    assert all(t <= res.games[g].deadline + 1e-9 for g, t in steps)  # no action after a deadline
    # Every game got its first turn early: all started within the first 25 steps of the run.
    assert max(g.state.started_at for g in res.games.values()) < 25 * 10 * 23 / 4
    # A game acts only while it holds a slot, and keeps it across its tool calls.
    per_hold = []
    for gid in res.games:
        hs = holds(res, gid)
        mine = [t for g, t in steps if g == gid]
        assert all(any(a <= t <= b for a, b in hs) for t in mine), gid
        per_hold += [sum(a <= t <= b for t in mine) for a, b in hs]
    assert max(per_hold) >= 5
    assert sum(1 for g, w, _ in worker.log if w == "start") == len(plans)  # resumed, never restarted


def test_a_game_keeps_its_slot_until_a_trim_or_level_then_the_best_waiting_one_gets_it(tmp_path):
    clock = VirtualClock()
    # Two games, one slot, field without first turns: "a" runs until its trim at 10 steps;
    # there "b" (unplayed, P = A + B at C = 1) outranks it and gets the slot.
    worker = ScriptedWorker(clock, {"a": [10**9], "b": [10**9]}, step_s=10, tokens_per_step=1000,
                            trim_tokens=10_000)
    pol = make_policy("field", SchedulerConfig(first_turns=False, slots=1))
    res = run_schedule(pol, ["a", "b"], slots=1, budget_s=400, worker=worker, clock=clock, records_dir=tmp_path)
    rel = [(t, g, why) for t, g, w, why in res.timeline if w == "release"]
    assert rel[0] == (pytest.approx(100.0), "a", "trim")
    assert [g for t, g, w, _ in res.timeline if w == "grant"][:2] == ["a", "b"]
    check_slots(res, 1)


def test_a_preemption_lands_at_the_next_model_request(tmp_path):
    clock = VirtualClock()
    # "stuck" never levels: past 2x the L1 median (54K tokens = 18 steps) it is stalled, and
    # the waiting "next" ranks above it: it yields before its next request, mid-level.
    worker = ScriptedWorker(clock, {"stuck": [10**9], "next": [10**9]}, step_s=10, tokens_per_step=3000,
                            total_levels={"stuck": 7, "next": 7})
    cfg = SchedulerConfig(first_turns=False, slots=1, adaptive=AdaptiveConfig(min_level_tokens=30_000))
    res = run_schedule(make_policy("adaptive", cfg), ["stuck", "next"], slots=1, budget_s=400, worker=worker,
                       clock=clock, records_dir=tmp_path)
    first = next((t, g, why) for t, g, w, why in res.timeline if w == "release")
    # Decided at 180 s (its 18th reply); the worker may already be in its next step by then.
    assert first[1:] == ("stuck", "preempted") and 180.0 <= first[0] <= 190.0
    assert ("stuck", "yield:preempted") in [(g, w) for g, w, _ in worker.log]
    check_slots(res, 1)


def test_fixed_keeps_the_duck_split_under_the_gated_runner(tmp_path):
    clock = VirtualClock()
    # Levels (in tokens, 1000 a step) are yield points; fixed gives the slot straight back.
    worker = ScriptedWorker(clock, {"a": [10_000, 20_000], "b": [10**9], "c": [5000]}, step_s=10,
                            total_levels={g: 5 for g in "abcde"})
    res = run_schedule(FixedPolicy(), ["a", "b", "c", "d", "e"], slots=2, budget_s=3000, worker=worker,
                       clock=clock, records_dir=tmp_path)
    starts = {g: t for g, w, t in worker.log if w == "start"}
    assert starts == {"a": 0, "b": 0, "c": 1000, "d": 1000, "e": 2000}  # 3 waves of 1000 s
    assert res.last_end <= 3000 and res.games["a"].result.levels == 2
    check_slots(res, 2)


@pytest.mark.parametrize("name", GATES + ["fixed"])
def test_bundled_games_random_policy_slots_and_deadlines(tmp_path, name):
    from duck.game.source import GameSource
    from duck.policies import make_policy as make_play_policy

    source = GameSource.offline(BUNDLED)
    ids = [g.game_id for g in source.games()]
    assert len(ids) >= 3
    budget = 2.4
    pol = FixedPolicy() if name == "fixed" else make_policy(name, SchedulerConfig(slots=2), margin_s=0.4)
    res = run_schedule(pol, ids, slots=2, budget_s=budget, source=source,
                       play_policy=lambda gid: make_play_policy("random", 0),
                       max_actions=10**6, records_dir=tmp_path / "records", max_poll_s=0.05)
    source.close()
    check_slots(res, 2)
    for gid, g in res.games.items():
        assert g.state.started_at is not None, f"{gid} never started"
        assert g.result is not None and g.result.error is None, g.result
        assert g.result.end_reason in ("deadline", "stopped", "won")
        # No action after the deadline. An action's time is stamped when it ends: one begun
        # just before the deadline may end after it by up to one step, as long as the longest
        # step of this game took (the random policy plays ~1 action per ms; one step took 69 ms
        # in the full suite at load ~9 on 2 cores). The record's clock starts when the game is
        # made, just after it was given its first slot.
        lines = [json.loads(x) for x in (tmp_path / "records" / f"{gid}.jsonl").read_text().splitlines()]
        acts = [x["t"] for x in lines if x.get("type") == "action"]
        step = max((b - a for a, b in zip(acts, acts[1:])), default=0.0)
        assert lines[-1]["type"] == "end"  # the record is closed
        late = max(0.2, 2 * step)
        assert not acts or max(acts) <= g.deadline - g.state.started_at + late, (gid, max(acts))
        assert g.ended_at <= g.deadline + 1.0, (gid, g.ended_at, g.deadline)  # loose: a shared box
    if name != "fixed":  # the random policy yields at its first action: everyone's first turn early,
        # before any game has ended, however slow the machine
        games = res.games.values()
        assert max(g.state.started_at for g in games) < min(g.ended_at for g in games)
    assert res.last_end <= budget + 1.0


def test_the_agent_yields_at_trims_and_holds_its_slot_across_tool_calls(tmp_path):
    """The real agent (loop, context trims, the real kernel) against the stub server: requests
    are sent only while the game holds a slot, several per hold (a tool call between each),
    and slots change hands at trims and first turns only."""
    from duck.agent.loop import AgentPolicy
    from duck.config import load_config
    from duck.game.source import GameSource
    from devkit.stub.models import FixedModel
    from devkit.stub.server import StubServer

    seen: list[tuple[float, str]] = []
    lock = threading.Lock()

    def reply(body):
        with lock:
            seen.append((time.monotonic(), body["_session"].rsplit(":", 1)[0]))
        return {"content": "Plan: keep going", "reasoning": "r" * 1500, "code": "action('RIGHT')"}

    cfg = load_config(overrides=["model.retries=0", "model.backoff_s=0.01", "model.name=stub",
                                 "agent.context_tokens=8000", "model.max_output_tokens=1000",
                                 "agent.fallback=null"], env={})
    source = GameSource.offline(BUNDLED)
    ids = [g.game_id for g in source.games()][:4]
    with StubServer(FixedModel([reply], loop=True)) as url:
        res = run_schedule(make_policy("field", SchedulerConfig(slots=2)), ids, slots=2, budget_s=12.0,
                           source=source, max_actions=400, records_dir=tmp_path / "records", max_poll_s=0.05,
                           play_policy=lambda gid: AgentPolicy(seed=0, config=cfg, model_url=url))
    source.close()
    check_slots(res, 2)
    assert all(g.state.started_at is not None and g.result.error is None for g in res.games.values())
    why = [w for _, _, k, w in res.timeline if k == "release"]
    assert "trim" in why and "preempted" in why, why
    per_hold = []
    for gid in ids:
        hs = [(a + res.t0, b + res.t0) for a, b in holds(res, gid)]
        mine = [t for t, g in seen if g == gid]
        assert mine, gid
        assert all(any(a <= t <= b for a, b in hs) for t in mine), gid
        per_hold += [sum(a <= t <= b for t in mine) for a, b in hs]
    assert max(per_hold) >= 5
    assert all(g.ended_at <= g.deadline + 2.0 for g in res.games.values())


def test_a_virtual_schedule_plays_the_same_way_every_time(tmp_path):
    """The runner decides only once every game thread waits, so a virtual-clock schedule is
    the same on every run (only the order of what happened at one instant may differ)."""
    def once():
        clock = VirtualClock()
        plans = {f"g{i}": [20_000 * (i % 3 + 1)] * (i % 4) for i in range(12)}
        worker = ScriptedWorker(clock, plans, step_s=10, tokens_per_step=1500, trim_tokens=30_000,
                                total_levels={g: 5 for g in plans})
        res = run_schedule(make_policy("adaptive", SchedulerConfig(slots=3), margin_s=100), list(plans), slots=3,
                           budget_s=3000, worker=worker, clock=clock, records_dir=tmp_path)
        return sorted(res.timeline), sorted(worker.log), res.summary()

    first = once()
    assert len(first[0]) > 50
    for _ in range(2):
        assert once() == first


def test_a_hung_worker_is_left_behind_after_the_grace(tmp_path):
    """A worker that ignores its stop and its deadline cannot hold the runner past the
    budget's end plus `grace_s` (the notebook closes the scorecard after it)."""
    release = threading.Event()

    def worker(source, game_id, policy, *, stop, deadline, **kw):
        if game_id == "hung":
            release.wait(60)
            return None
        stop.wait(max(0.0, deadline - time.monotonic()))
        return None

    t = time.monotonic()
    try:
        res = run_schedule(FixedPolicy(), ["hung", "fine"], slots=2, budget_s=0.3, grace_s=0.4, worker=worker,
                           records_dir=tmp_path, max_poll_s=0.05)
    finally:
        release.set()
    assert time.monotonic() - t < 5.0
    assert "did not return" in res.games["hung"].error and res.games["hung"].ended_at is None
    assert res.games["fine"].error is None and res.games["fine"].ended_at is not None


def test_a_failing_policy_stops_the_started_games_and_raises(tmp_path):
    class Breaks:
        name = "breaks"

        def __init__(self):
            self.inner = FixedPolicy()

        def decide(self, now, budget_end, slots, games):
            if now >= 100:
                raise RuntimeError("policy bug")
            return self.inner.decide(now, budget_end, slots, games)

    clock = VirtualClock()
    worker = ScriptedWorker(clock, {"a": [10**9], "b": [10**9]}, step_s=10)
    with pytest.raises(RuntimeError, match="policy bug"):
        run_schedule(Breaks(), ["a", "b"], slots=2, budget_s=1000, worker=worker, clock=clock,
                     records_dir=tmp_path, max_poll_s=50)
    t = time.monotonic()
    while sum(w == "end" for _, w, _ in worker.log) < 2 and time.monotonic() - t < 10:
        time.sleep(0.01)
    ends = [t for _, w, t in worker.log if w == "end"]
    # Decided at 110 (the first action at 10, then every 50 s): stopped after the step under
    # way, not at the deadline (1000).
    assert len(ends) == 2 and max(ends) <= 120
