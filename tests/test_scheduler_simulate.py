"""The simulator: exact replay of recorded curves, splices, determinism, same draws."""

from __future__ import annotations

import json

import pytest

from scheduler import curves, extend
from duck.config import ConfigError
from scheduler.cli import main as cli_main
from duck.testing.scheduler_fakes import write_synthetic
from duck.paths import SHARED
from scheduler.policy import make_policy
from scheduler.simulate import GameDraw, GameSim, Scenario, draw_set, evaluate, group_runs, simulate

TRACES = SHARED / "duck-traces" / "runs.jsonl"
PUBLIC_GAMES = SHARED / "public-games.json"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    runs_path, base_path = write_synthetic(tmp_path_factory.mktemp("syn"))
    runs = curves.load_runs(runs_path, curves.load_baselines(base_path))
    return runs_path, base_path, runs, extend.fit(runs)


@pytest.fixture(scope="module")
def duck():
    if not (TRACES.exists() and PUBLIC_GAMES.exists()):
        pytest.skip("Duck traces not available (../shared/duck-traces)")
    runs = curves.load_runs(TRACES, curves.load_baselines(PUBLIC_GAMES))
    return runs, extend.fit(runs)


def test_official_score_formula():
    # Level 2 at 1.15 cannot make up for level 1's 0.25: capped at the completed weight.
    assert curves.game_score([10, 10], [20, 5]) == pytest.approx(100 * (0.25 + 2 * 1.15) / 3)
    assert curves.game_score([10, 10], [10, 5]) == pytest.approx(100.0)  # capped at 3/3
    assert curves.game_score([10, 10, 10], []) == 0.0


def test_recomputed_scores_agree_with_the_recorded_ones(duck):
    runs, _ = duck
    agree, total, worst = curves.check_scores(runs)
    assert (agree, total) == (250, 250) and worst < 1e-9


def test_a_run_replayed_alone_is_its_recording(duck):
    runs, model = duck
    for r in runs[::7]:
        g = GameSim(GameDraw(0, r, (), 1), model, extend=False)
        g.advance(1e9)
        assert g.levels == len(r.level_times)
        assert g.score() == pytest.approx(r.final_score)
        assert g.over_at == pytest.approx(r.end)  # exhausted at the recorded end


def test_fresh_start_splices_another_run_and_keeps_the_abandoned_actions(synthetic):
    _, _, runs, model = synthetic
    pool = group_runs(runs)
    a = pool["aa01-00000001"][3]  # never levels
    b = pool["aa01-00000001"][1]  # level 1 after 400 s with 9 actions
    g = GameSim(GameDraw(0, a, (b,), 1), model, extend=False)
    g.advance(1000.0)
    spent = g.actions(1000.0)
    assert g.levels == 0 and spent > 0
    g.fresh_start(1000.0)
    g.advance(1400.0 + 1e-6)
    assert g.levels == 1 and g.fresh_spliced == 1
    assert g.level_actions == [spent + 9]  # the stalled attempt's actions count on the level


def test_draws_depend_on_the_seed_only(synthetic):
    _, _, runs, _ = synthetic
    pool = group_runs(runs)
    a, b, c = draw_set(pool, 7, 30), draw_set(pool, 7, 30), draw_set(pool, 8, 30)
    assert [(d.run.game_id, d.run.pass_, [s.pass_ for s in d.spares], d.seed) for d in a] == [
        (d.run.game_id, d.run.pass_, [s.pass_ for s in d.spares], d.seed) for d in b
    ]
    assert [d.run.pass_ for d in a] != [d.run.pass_ for d in c]


def test_same_draws_whatever_the_policy(synthetic):
    _, _, runs, model = synthetic
    sc = Scenario("t", budget_s=3 * 1800.0, slots=4, n_games=12)
    fixed = make_policy("fixed")
    alone = evaluate(runs, {"fixed": fixed}, sc, range(3), model)["fixed"]
    both = evaluate(runs, {"adaptive": make_policy("adaptive"), "fixed": fixed}, sc, range(3), model)
    assert [o.per_game_scores for o in alone] == [o.per_game_scores for o in both["fixed"]]
    again = evaluate(runs, {"adaptive": make_policy("adaptive")}, sc, range(3), model)["adaptive"]
    assert [o.per_game_scores for o in again] == [o.per_game_scores for o in both["adaptive"]]


def test_every_game_played_and_deadline_held(synthetic):
    _, _, runs, model = synthetic
    sc = Scenario("t", budget_s=4 * 1800.0, slots=5, n_games=18, extend=True)
    draws = draw_set(group_runs(runs), 3, sc.n_games)
    for name in ("fixed", "adaptive"):
        o = simulate(draws, make_policy(name), model, sc)
        assert o.unplayed == 0
    o = simulate(draws, make_policy("adaptive", margin_s=sc.margin_s), model, sc)
    assert o.last_end <= sc.budget_s  # the margin covers the stop latency


def test_cli_compare_prints_the_paired_difference(synthetic, capsys):
    runs_path, base_path, _, _ = synthetic
    rc = cli_main(["simulate", "--runs", str(runs_path), "--baselines", str(base_path),
                   "--scenario", "30min", "--seeds", "3", "--games", "12", "--slots", "4",
                   "--compare"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for name in ("fixed", "adaptive"):
        assert set(doc[name]["expected_score"]) == {"mean", "ci95"}
        assert set(doc[name]["expected_levels"]) == {"mean", "ci95"}
        assert doc[name]["last_end_seconds"] > 0
    assert "score" in doc["paired_difference"]["adaptive_minus_fixed"]
    rc = cli_main(["simulate", "--runs", str(runs_path), "--baselines", str(base_path),
                   "--policy", "fixed", "--scenario", "kaggle", "--seeds", "2", "--games", "6"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "fixed" and "extension_model" in doc


def test_cli_set_is_validated_like_the_config(synthetic, capsys):
    runs_path, base_path, _, _ = synthetic
    base = ["simulate", "--runs", str(runs_path), "--baselines", str(base_path), "--seeds", "2", "--games", "6"]
    assert cli_main(base + ["--set", "stall_s=600", "--set", "max_fresh=0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["adaptive_overrides"] == {"stall_s": 600.0, "max_fresh": 0}
    with pytest.raises(ConfigError, match="scheduler.adaptive.stal_s: unknown field"):
        cli_main(base + ["--set", "stal_s=600"])
