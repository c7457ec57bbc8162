"""The slot book on its own: the rules the runner and the simulator share (scheduler.book),
driven by the real policies."""

from __future__ import annotations

import pytest

from duck.config import FixedConfig, SchedulerConfig
from scheduler.book import SlotBook
from scheduler.policy import FixedPolicy, GameState, make_policy


def book_of(n, policy, slots=2, budget_s=1000.0, ends_at_once=False):
    """A book over `n` games; `ends_at_once`: a stop ends the game on the spot (the
    simulator's way), else it only records the stop (the runner's: the worker ends later)."""
    stopped: list[tuple[str, float]] = []

    def on_stop(gid, now):
        stopped.append((gid, now))
        if ends_at_once:
            book.end(gid, now)

    book = SlotBook([GameState(f"g{i}") for i in range(n)], slots=slots, budget_s=budget_s, policy=policy,
                    on_stop=on_stop)
    return book, stopped


def test_grants_fill_the_free_slots_only_and_clip_deadlines_to_the_budget():
    book, _ = book_of(5, FixedPolicy(FixedConfig(allot_s=5000.0)), slots=2)
    assert book.decide(0.0) == [("g0", "start"), ("g1", "start")]
    assert book.held == 2 and book.deadlines == {"g0": 1000.0, "g1": 1000.0}  # 5000 asked, 1000 the budget
    assert book.decide(10.0) == []  # full
    book.release("g0", "level", 20.0)
    assert book.held == 1 and book.states["g0"].status == "waiting"
    assert book.decide(20.0) == [("g0", "resume")]  # fixed resumes a waiting game first
    book.end("g1", 30.0)
    assert book.decide(30.0) == [("g2", "start")] and book.held == 2 == book.max_held
    assert [(g, w, why) for _, g, w, why in book.timeline] == [
        ("g0", "grant", "start"), ("g1", "grant", "start"), ("g0", "release", "level"),
        ("g0", "grant", "resume"), ("g1", "release", "end"), ("g2", "grant", "start")]


def test_nothing_is_granted_at_or_after_the_budgets_end():
    book, _ = book_of(3, make_policy("field", SchedulerConfig(slots=2)), slots=2, budget_s=100.0)
    assert book.decide(100.0) == [] and book.held == 0


def test_a_stop_is_sent_once_and_a_stopped_game_never_resumes():
    book, stopped = book_of(2, FixedPolicy(FixedConfig(allot_s=50.0)), slots=2, budget_s=1000.0)
    book.decide(0.0)
    book.release("g0", "trim", 10.0)
    book.overdue(49.0)
    assert stopped == []
    book.overdue(50.0)  # both deadlines: the running and the waiting one
    assert sorted(stopped) == [("g0", 50.0), ("g1", 50.0)]
    assert book.decide(50.0) == []  # the fixed policy would resume g0; the book does not
    book.stop("g1", 60.0)
    book.overdue(70.0)
    assert len(stopped) == 2  # once each
    # The runner's way: a stopped game holds its slot until its worker ends.
    assert book.held == 1 and book.live()
    book.end("g1", 75.0)
    book.end("g0", 80.0)
    assert not book.live() and book.held == 0 and book.last_end == 80.0 and book.next_deadline() == float("inf")


def test_the_simulators_stop_frees_the_slot_for_the_same_decision():
    # At the margin every gate policy stops everything: ended on the spot, nothing granted after.
    book, stopped = book_of(3, make_policy("field", SchedulerConfig(slots=2), margin_s=100.0), slots=2,
                            budget_s=1000.0, ends_at_once=True)
    book.decide(0.0)
    assert book.held == 2 and book.deadlines == {"g0": 900.0, "g1": 900.0}
    book.decide(900.0)
    assert sorted(g for g, _ in stopped) == ["g0", "g1"] and book.held == 0
    assert {s.game_id: s.status for s in book.order} == {"g0": "done", "g1": "done", "g2": "queued"}


@pytest.mark.parametrize("name", ["field", "ucb", "adaptive"])
def test_preemption_marks_running_games_only_and_a_release_clears_it(name):
    cfg = SchedulerConfig(slots=1)
    book, _ = book_of(2, make_policy(name, cfg), slots=1)
    assert book.decide(0.0) == [("g0", "start")]
    book.states["g0"].progress(levels=0, actions=1, tokens=cfg.first_turn_tokens)
    book.decide(5.0)  # g1 is unplayed: g0, past its first turn, yields at its next request
    assert book.states["g0"].preempt_requested and not book.states["g1"].preempt_requested
    book.release("g0", "preempted", 6.0)
    assert not book.states["g0"].preempt_requested
    assert book.decide(6.0) == [("g1", "start")]
