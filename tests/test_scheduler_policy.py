"""Scheduling policies on hand-built states: no clock, no I/O, just decisions."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from duck.config import AdaptiveConfig, SchedulerConfig
from scheduler.policy import AdaptivePolicy, FixedPolicy, GameState, make_policy


def running(gid, started, levels=0, last_level=None, fresh=0, last_fresh=None):
    return GameState(gid, "running", started_at=started, levels=levels, last_level_at=last_level,
                     fresh_starts=fresh, last_fresh_at=last_fresh)


def test_fixed_allotment_matches_the_duck():
    f = FixedPolicy()
    assert f.allotment(4 * 1800, 28, 110) == pytest.approx(1800)  # the 30min scenario
    assert f.allotment(9 * 3600 - 720, 28, 110) == pytest.approx(132 * 60)  # 132 min each
    assert f.allotment(3600, 10, 10) == pytest.approx(3600)  # one wave: the whole budget


def test_fixed_starts_in_order_up_to_free_slots_and_stops_at_allotment():
    games = [GameState(f"g{i}") for i in range(4)]  # 2 waves of 2: 100 s each
    d = FixedPolicy().decide(0.0, 200.0, 2, games)
    assert d.start == ["g0", "g1"]
    assert d.deadlines == {"g0": pytest.approx(100.0), "g1": pytest.approx(100.0)}
    games[0] = running("g0", 0.0)
    games[1] = running("g1", 50.0)
    d = FixedPolicy().decide(100.0, 200.0, 2, games)
    assert d.stop == ["g0"] and d.start == []
    assert d.wake_at == pytest.approx(150.0)


def test_adaptive_thresholds_are_validated_config():
    with pytest.raises(ValidationError):
        AdaptiveConfig(stall_s=-1)
    with pytest.raises(ValidationError, match="stal_s"):
        AdaptiveConfig(stal_s=5)  # a typo is an error, not the defaults
    assert make_policy("adaptive", SchedulerConfig(adaptive=AdaptiveConfig(stall_s=600))).config.stall_s == 600
    with pytest.raises(TypeError):
        make_policy("adaptive", stal_s=5)
    with pytest.raises(ValueError):
        make_policy("nope")
    with pytest.raises(ValueError, match="no margin"):
        make_policy("fixed", margin_s=300)


def _play_out(policy, n_games, slots, budget, levels_at=None, step=10.0):
    """A tiny discrete-time loop: games never end by themselves; levels at given play times."""
    games = [GameState(f"g{i}") for i in range(n_games)]
    ended, deadlines = {}, {}
    t = 0.0
    while t <= budget:
        for g in games:
            if g.status == "running" and levels_at and g.game_id in levels_at:
                due = [x for x in levels_at[g.game_id] if x <= t - g.started_at]
                if len(due) > g.levels:
                    g.levels, g.last_level_at = len(due), g.started_at + due[-1]
            if g.status == "running" and (g.stop_requested or t >= deadlines[g.game_id]):
                g.status, ended[g.game_id] = "done", t
        d = policy.decide(t, budget, slots, games)
        by_id = {g.game_id: g for g in games}
        for gid in d.stop:
            by_id[gid].stop_requested = True
        for gid in d.fresh:
            by_id[gid].fresh_starts += 1
            by_id[gid].last_fresh_at = t
        free = slots - sum(g.status == "running" for g in games)
        for gid in d.start[:free]:
            g = by_id[gid]
            g.status, g.started_at = "running", t
            deadlines[gid] = d.deadlines[gid]
        t += step
    return games, ended, deadlines


def test_adaptive_starts_every_game_and_respects_the_margin():
    pol = AdaptivePolicy(margin_s=300)
    games, ended, deadlines = _play_out(pol, n_games=23, slots=4, budget=7200)
    assert all(g.started_at is not None for g in games), "an unplayed game scores 0"
    assert all(dl <= 7200 - 300 for dl in deadlines.values())
    assert all(t <= 7200 - 300 + 10 for t in ended.values())  # one loop step of slack


def test_adaptive_never_starts_a_game_after_its_cutoff():
    pol = AdaptivePolicy(margin_s=300)
    d = pol.decide(6950.0, 7200.0, 2, [GameState("a"), GameState("b")])
    assert d.start == []


def test_stalled_first_level_gets_a_fresh_start_not_a_stop():
    pol = AdaptivePolicy(margin_s=300)
    games = [running("a", 0.0), GameState("q")]
    d = pol.decide(950.0, 7200.0, 1, games)  # stalled 950 s, queue waiting
    assert d.fresh == ["a"] and d.stop == []


def test_stalled_game_yields_its_time_to_a_progressing_one():
    pol = AdaptivePolicy(margin_s=300)
    # 14 games on 2 slots, 7200 s: share 986 s; the 12 queued need 6 x 900 s per slot.
    hot = running("hot", 0.0, levels=2, last_level=990.0)  # past its share, still levelling
    cold = running("cold", 50.0, levels=1, last_level=90.0)  # stalled 910 s, had a level
    queue = [GameState(f"q{i}") for i in range(12)]
    d = pol.decide(1000.0, 7200.0, 2, [hot, cold] + queue)
    assert d.stop == ["cold"]  # cold pays for hot
    # Without a progressing game to pay for, the stalled one keeps the rest of its share.
    calm = running("calm", 100.0, levels=1, last_level=150.0)
    d = pol.decide(1000.0, 7200.0, 2, [calm, cold] + queue)
    assert d.stop == []


def test_stalled_first_level_after_its_fresh_start_counts_as_spent():
    pol = AdaptivePolicy(margin_s=300)
    hot = running("hot", 0.0, levels=2, last_level=990.0)
    b = running("b", 50.0, fresh=1, last_fresh=90.0)  # stalled again 910 s after its fresh start
    queue = [GameState(f"q{i}") for i in range(12)]
    d = pol.decide(1000.0, 7200.0, 2, [hot, b] + queue)
    assert d.stop == ["b"] and d.fresh == []
    b0 = running("b0", 50.0)  # never had a fresh start: gets one instead of a stop
    d = pol.decide(1000.0, 7200.0, 2, [hot, b0] + queue)
    assert d.fresh == ["b0"] and "b0" not in d.stop


def test_progressing_game_runs_past_its_share_while_slack_remains():
    pol = AdaptivePolicy(margin_s=300)
    # 3 games on 2 slots: 2 waves, so the second slot's second wave is slack.
    share = FixedPolicy().allotment(7200 - 300, 2, 3)
    hot = running("hot", 0.0, levels=2, last_level=share - 100)
    cold = running("cold", 0.0, levels=1, last_level=10.0, fresh=1)
    games = [hot, cold, GameState("q1")]
    d = pol.decide(share + 1, 7200.0, 2, games)
    assert d.stop == ["cold"]
    # Late, with two queued games that need min_play_s each: the progressing game yields.
    hot = running("hot", 0.0, levels=5, last_level=6400.0)
    d = pol.decide(6500.0, 7200.0, 2, [hot, cold, GameState("q1"), GameState("q2")])
    assert set(d.stop) == {"cold", "hot"}


def test_wake_at_is_the_next_threshold():
    pol = AdaptivePolicy(AdaptiveConfig(stall_s=900, min_play_s=900))
    d = pol.decide(100.0, 7200.0, 1, [running("a", 0.0)])
    assert d.wake_at == pytest.approx(900.0)
    assert not math.isinf(d.wake_at)


def test_queue_is_served_even_when_every_running_game_progresses():
    pol = AdaptivePolicy(AdaptiveConfig(min_play_s=900), margin_s=300)
    # Every game levels every 200 s forever: all are "progressing" past their share.
    levels_at = {f"g{i}": [200.0 * k for k in range(1, 100)] for i in range(9)}
    games, ended, deadlines = _play_out(pol, n_games=9, slots=4, budget=7200, levels_at=levels_at)
    assert all(g.started_at is not None for g in games)
    last_start = max(g.started_at for g in games)
    assert last_start <= 7200 - 300 - 900 + 20  # min_play_s, less two loop steps of latency
