"""Scheduling policies on hand-built states: no clock, no I/O, just decisions."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from duck.config import AdaptiveConfig, SchedulerConfig, UcbConfig
from scheduler import field
from scheduler.policy import FixedPolicy, GameState, make_policy


def game(gid, status="waiting", *, levels=0, actions=0, tokens=0, level_actions=None, level_tokens=None,
         stint_tokens=None, total=7, started=0.0):
    """A game that has played (unless queued), with its counts on the current level."""
    g = GameState(gid, status, total_levels=total, started_at=None if status == "queued" else started,
                  levels=levels, actions=actions, tokens=tokens)
    g.level_actions0 = actions - (actions if level_actions is None else level_actions)
    g.level_tokens0 = tokens - (tokens if level_tokens is None else level_tokens)
    g.stint_tokens0 = tokens - (0 if stint_tokens is None else stint_tokens)
    return g


def no_first_turns(**kw):
    return SchedulerConfig(first_turns=False, **kw)


# -- fixed (the Duck's split, unchanged) -------------------------------------------------------
def test_fixed_allotment_matches_the_duck():
    f = FixedPolicy()
    assert f.allotment(4 * 1800, 28, 110) == pytest.approx(1800)
    assert f.allotment(9 * 3600 - 720, 28, 110) == pytest.approx(132 * 60)  # 132 min each
    assert f.allotment(3600, 10, 10) == pytest.approx(3600)  # one wave: the whole budget


def test_fixed_starts_in_order_up_to_free_slots_and_stops_at_allotment():
    games = [GameState(f"g{i}") for i in range(4)]  # 2 waves of 2: 100 s each
    d = FixedPolicy().decide(0.0, 200.0, 2, games)
    assert d.start == ["g0", "g1"] and d.deadlines == {"g0": pytest.approx(100.0), "g1": pytest.approx(100.0)}
    games[0] = GameState("g0", "running", started_at=0.0)
    games[1] = GameState("g1", "running", started_at=50.0)
    d = FixedPolicy().decide(100.0, 200.0, 2, games)
    assert d.stop == ["g0"] and d.start == [] and d.wake_at == pytest.approx(150.0)


# -- field: P = (A + B) * C as published ---------------------------------------------------------
def test_field_priority_is_the_published_formula():
    # Level 2 of an 8-level game, 30 actions and 40K tokens on it, 10% into the run:
    # A = 2 (25/55)^2 55/36, B = 8 (6 levels left after it), C = .25 2^-(30/115)^2 + .75 2^-(40/62)^2.
    a = 2 * (25 / 55) ** 2 * 55 / 36
    c = 0.25 * 2 ** -((30 / 115) ** 2) + 0.75 * 2 ** -((40_000 / 62_000) ** 2)
    assert field.priority(2, 30, 40_000, 8, 0.1) == pytest.approx((a + 8) * c)
    # N is clipped to 6-10 in A; B counts the levels left after this one (2 -> 7, 1 -> 5, 0 -> 0).
    assert field.priority(1, 0, 0, 3, 0.0) == pytest.approx(1 * 55 / 21 + 7)
    assert field.priority(3, 0, 0, 3, 0.0) == pytest.approx(3 * 55 / 21)
    assert field.priority(1, 0, 0, 20, 0.0) == pytest.approx(55 / 55 + 8)
    # B fades to 0 over the last 20% of the time.
    assert field.priority(1, 0, 0, 6, 0.9) == pytest.approx(55 / 21 + 4)
    assert field.priority(1, 0, 0, 6, 1.0) == pytest.approx(55 / 21)
    assert field.chance(115, 62_000) == pytest.approx(0.5)


def test_field_gives_free_slots_to_the_highest_priority_and_never_preempts():
    pol = make_policy("field", no_first_turns())
    games = [game("stuck", "running", level_tokens=300_000, level_actions=400),
             game("fresh_level", levels=1, level_tokens=0),
             game("old", level_tokens=150_000, level_actions=200),
             game("young", level_tokens=10_000, level_actions=5)]
    d = pol.decide(100.0, 1000.0, 2, games)
    assert d.start == ["fresh_level"]  # one free slot: the best waiting game (level 2: A doubles)
    games[1].status = "done"
    assert pol.decide(100.0, 1000.0, 2, games).start == ["young"]
    assert d.preempt == [] and d.stop == []
    d = pol.decide(100.0, 1000.0, 1, games)
    assert d.start == [] and d.preempt == []  # field waits for the stuck game's own yield point


# -- first turns early ----------------------------------------------------------------------------
def test_unplayed_games_go_first_and_played_ones_make_room():
    pol = make_policy("field", SchedulerConfig())
    games = [game("a", "running", actions=3, tokens=5000, stint_tokens=5000),
             game("b", "running", actions=0, tokens=2000, stint_tokens=2000),  # still in its first turn
             game("c", "queued"), game("d", "queued"), game("e", "queued"),
             game("w", level_tokens=100)]
    d = pol.decide(10.0, 1000.0, 2, games)
    assert d.preempt == ["a"]  # only the game past its first turn; b finishes its turn first
    assert d.recheck == {"b": 2001}  # look again after b's next reply
    assert d.start == []  # no free slot yet
    games[0].status = "waiting"
    d = pol.decide(11.0, 1000.0, 2, games)
    assert d.start == ["c"]  # one free slot: the first unplayed game, before any waiting one


def test_a_first_turn_that_never_acts_counts_as_played_past_its_token_cap():
    pol = make_policy("field", SchedulerConfig(first_turn_tokens=4096))
    games = [game("a", "running", actions=0, tokens=5000, stint_tokens=5000), game("q", "queued")]
    assert pol.decide(1.0, 100.0, 1, games).preempt == ["a"]


# -- ucb --------------------------------------------------------------------------------------------
def test_ucb_index_and_slices():
    cfg = no_first_turns(ucb=UcbConfig(slice_tokens=50_000, unit_tokens=10_000, exploration=0.02))
    pol = make_policy("ucb", cfg)
    good = game("good", levels=2, tokens=40_000, total=6)  # 3/21 of the score in 4 pulls
    poor = game("poor", levels=0, tokens=40_000, total=6)
    new = game("new", "queued")
    games = [good, poor, new]
    pol.prepare(0.0, 1.0, games)
    total = 8.0  # pulls of the played games
    assert pol.priority(good, 0, 1, games) == pytest.approx(3 / 21 / 4 + 0.02 * math.sqrt(math.log(total) / 4))
    assert pol.priority(poor, 0, 1, games) == pytest.approx(0.02 * math.sqrt(math.log(total) / 4))
    assert pol.priority(new, 0, 1, games) == math.inf
    # A running game is preempted at the end of its slice when a waiting game ranks higher.
    runner = game("runner", "running", levels=0, tokens=60_000, stint_tokens=60_000, total=6)
    d = pol.decide(5.0, 100.0, 1, [runner, good])
    assert d.preempt == ["runner"]
    mid = game("mid", "running", levels=0, tokens=30_000, stint_tokens=30_000, total=6)
    d = pol.decide(5.0, 100.0, 1, [mid, good])
    assert d.preempt == [] and d.recheck == {"mid": 50_000}


# -- adaptive ----------------------------------------------------------------------------------------
def test_adaptive_ranks_near_done_then_fresh_then_stalled():
    pol = make_policy("adaptive", no_first_turns())
    near = game("near", level_tokens=20_000, level_actions=10)  # L1, median 27K: 7K to go
    fresh = game("fresh", level_tokens=0)
    stalled = game("stalled", level_tokens=80_000, level_actions=40)  # past 2x the L1 median
    many_actions = game("many", level_tokens=20_000, level_actions=110)  # par 55: a quarter of the value
    d = pol.decide(1.0, 1000.0, 4, [stalled, fresh, many_actions, near])
    assert d.start == ["near", "fresh", "many", "stalled"]


def test_adaptive_preempts_a_stalled_game_for_a_better_one_but_never_a_young_level():
    pol = make_policy("adaptive", no_first_turns())
    stalled = game("stalled", "running", level_tokens=80_000, level_actions=40)
    young = game("young", "running", level_tokens=20_000, level_actions=5)
    waiting = game("w", level_tokens=0)
    d = pol.decide(1.0, 1000.0, 2, [stalled, young, waiting])
    assert d.preempt == ["stalled"]
    off = make_policy("adaptive", no_first_turns(adaptive=AdaptiveConfig(preempt=False)))
    assert off.decide(1.0, 1000.0, 2, [stalled, young, waiting]).preempt == []
    # Nobody better waiting: the stalled game keeps its slot (an idle slot earns nothing).
    hopeless = game("h", level_tokens=90_000, level_actions=60)
    assert pol.decide(1.0, 1000.0, 2, [stalled, young, hopeless]).preempt == []
    # It is looked at again when it would count as stalled, then every few thousand tokens.
    young = game("young", "running", tokens=30_000, level_tokens=20_000, level_actions=5)
    d = pol.decide(1.0, 1000.0, 2, [young, game("x", level_tokens=0)])
    assert d.recheck["young"] == 10_000 + 54_000  # 2 x 27K on level 1, from the level's start


def test_adaptive_cuts_a_level_the_time_left_cannot_pay():
    pol = make_policy("adaptive", no_first_turns())
    # 1M tokens in 1000 s on 10 slots: 100 tok/s per slot; 100 s left = 10K tokens per slot.
    games = [game(f"r{i}", "running", tokens=100_000) for i in range(10)]
    l1 = game("l1", level_tokens=20_000)  # 7K to go: fits
    l2 = game("l2", levels=1, level_tokens=0)  # 51K to go: does not
    pol.prepare(1000.0, 1100.0, games + [l1, l2])
    assert pol.priority(l1, 1000.0, 1100.0, games) > pol.priority(l2, 1000.0, 1100.0, games)


# -- the gate, for all three ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["field", "ucb", "adaptive"])
def test_the_margin_ends_everything_and_no_slot_is_given_after_it(name):
    pol = make_policy(name, SchedulerConfig(), margin_s=60)
    games = [game("r", "running"), game("w"), game("q", "queued"), game("d", "done")]
    d = pol.decide(950.0, 1000.0, 4, games)
    assert sorted(d.stop) == ["r", "w"] and d.start == []
    d = pol.decide(100.0, 1000.0, 4, games)
    assert set(d.start) == {"w", "q"} and d.deadlines == {"w": 940.0, "q": 940.0}


@pytest.mark.parametrize("name", ["field", "ucb", "adaptive"])
def test_every_free_slot_is_filled_while_games_wait(name):
    pol = make_policy(name, SchedulerConfig())
    games = [game(f"w{i}", level_tokens=1000 * i, level_actions=i) for i in range(5)]
    assert len(pol.decide(1.0, 100.0, 3, games).start) >= 3


def test_policies_are_validated_config():
    with pytest.raises(ValidationError, match="stall_factr"):
        AdaptiveConfig(stall_factr=3)  # a typo is an error, not the defaults
    with pytest.raises(ValidationError):
        SchedulerConfig(policy="equal")
    assert make_policy("adaptive", SchedulerConfig(adaptive=AdaptiveConfig(stall_factor=3))).config.stall_factor == 3
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("nope")
    with pytest.raises(ValueError, match="no margin"):
        make_policy("fixed", margin_s=300)
    with pytest.raises(ValueError):
        make_policy("field", margin_s=-1)
