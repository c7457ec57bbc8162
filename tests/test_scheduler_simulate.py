"""The simulator: the token curves, the throughput model, the synthetic set, the same draws
for every policy, slots and deadlines, and `duck simulate`."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from duck.cli import main as cli_main
from duck.config import SchedulerConfig
from duck.paths import SHARED
from duck.play.scoring import game_score
from devkit.simulator import compare, curves, extend, synthetic, traces
from scheduler.policy import make_policy
from devkit.simulator.simulate import SCENARIOS, Scenario, simulate
from devkit.simulator.throughput import Server
from devkit.simulator.trajectories import DuckGame, draw_duck, score

from scheduler_fakes import write_synthetic

TRACES = SHARED / "duck-traces" / "runs.jsonl"
PUBLIC_GAMES = SHARED / "public-games.json"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    runs_path, base_path = write_synthetic(tmp_path_factory.mktemp("syn"))
    runs = traces.load_token_runs(runs_path, curves.load_baselines(base_path))
    return runs_path, base_path, runs


@pytest.fixture(scope="module")
def duck():
    if not (TRACES.exists() and PUBLIC_GAMES.exists()):
        pytest.skip("Duck traces not available (../shared/duck-traces)")
    base = curves.load_baselines(PUBLIC_GAMES)
    runs = traces.load_token_runs(TRACES, base)
    return runs, base, extend.fit_tokens(runs)


class Flat:
    """A plain trajectory: `n` turns of `gen` tokens, one action each, never a level."""

    def __init__(self, gid, n=10**9, gen=1000, growth=1500):
        self.game_id, self.baselines, self.level_actions = gid, (10, 10), []
        self.n, self.gen, self.growth, self.k = n, gen, growth, 0

    def next_turn(self):
        if self.k >= self.n:
            return None
        self.k += 1
        return self.gen, self.growth, self.k, 0


def test_official_score_formula():
    # Level 2 at 1.15 cannot make up for level 1's 0.25: capped at the completed weight.
    assert game_score([10, 10], [20, 5]) == pytest.approx(100 * (0.25 + 2 * 1.15) / 3)
    assert game_score([10, 10], [10, 5]) == pytest.approx(100.0)  # capped at 3/3
    assert game_score([10, 10, 10], []) == 0.0


def test_the_duck_runs_in_tokens_keep_their_scores_and_levels(duck):
    runs, _, _ = duck
    recorded = {(r.game_id, r.pass_): r for r in curves.load_runs(TRACES, curves.load_baselines(PUBLIC_GAMES))}
    assert len(runs) == 250
    for r in runs:
        rec = recorded[(r.game_id, r.pass_)]
        assert r.score() == pytest.approx(rec.final_score, abs=1e-9)
        assert r.levels[-1] == len(rec.level_times) and len(r.level_tokens()) == len(rec.level_times)
        assert all(g > 0 for g in r.gen) and all(w >= g for g, w in zip(r.gen, r.growth))
    # ~20 tokens a second for 45 minutes: the conversion lands where the Duck's speed says.
    assert 40_000 < np.median([r.tokens for r in runs]) < 80_000


def test_a_duck_game_replays_its_record_then_extends_it(duck):
    runs, _, model = duck
    for r in runs[::25]:
        g = DuckGame(0, r, None, 1)
        seen = [g.next_turn() for _ in range(len(r.gen))]
        assert g.next_turn() is None  # no model: over at the recorded end
        assert [t[0] for t in seen] == list(r.gen) and [t[3] for t in seen] == list(r.levels)
        assert score(g, g.levels) == pytest.approx(r.score())
    # Extended from 57K to ~175K tokens (what a game gets at 10 slots in the Kaggle run): a
    # few more levels, not many (the Duck's tail hazard is low but not zero).
    extra = []
    for r in runs:
        g = DuckGame(0, r, model, r.pass_ + 17)
        tok = 0
        while tok < 175_000 and (t := g.next_turn()) is not None:
            tok += t[0]
        extra.append(g.levels - r.levels[-1])
    assert 0.2 < np.mean(extra) < 2.0, np.mean(extra)


def test_one_stream_decodes_at_the_single_stream_rate_and_more_share_the_aggregate():
    sv = Server()
    assert sv.per_stream(1) == pytest.approx(169.0) and sv.aggregate(10) == pytest.approx(169 * 10**0.6)
    sc = Scenario("t", budget_s=1000.0, slots=1, n_games=1, context_tokens=10**9)
    o = simulate([Flat("a")], make_policy("field", SchedulerConfig(slots=1)), sc, sv)
    # Per turn: 1000 tokens at 169 tok/s, a 2 s tool call and 500 new tokens to prefill.
    per_turn = 1000 / 169 + sv.tool_s + 500 / sv.prefill_tps
    assert o.tokens == pytest.approx(1000 * ((1000 - 4000 / sv.prefill_tps) // per_turn), abs=1000)
    sc10 = replace(sc, slots=10, n_games=10)
    o10 = simulate([Flat(f"g{i}") for i in range(10)], make_policy("field", SchedulerConfig(slots=10)), sc10, sv)
    per_turn10 = 1000 / sv.per_stream(10) + sv.tool_s + 500 / sv.prefill_tps
    assert o10.tokens == pytest.approx(10 * 1000 * (1000 // per_turn10), rel=0.02)
    # 10 streams get ~10^0.6 times the tokens of one, a little more: a tool call's 2 s are a
    # smaller share of a slower turn.
    assert 10**0.6 < o10.tokens / o.tokens < 1.3 * 10**0.6


def test_trims_are_yield_points_and_cost_a_prefill():
    sc = Scenario("t", budget_s=2000.0, slots=1, n_games=2, context_tokens=20_000, output_tokens=2000,
                  evict_to=0.5)
    # Context grows 1500 a turn from 4000: past 18K after 10 turns, a trim back to 10K.
    o = simulate([Flat("a"), Flat("b")], make_policy("field", SchedulerConfig(slots=1, first_turns=False)), sc)
    assert o.yields > 2 and o.preemptions == 0 and o.max_holding == 1 and o.unplayed == 0


@pytest.mark.parametrize("name", ["field", "ucb", "adaptive", "fixed"])
def test_slots_never_exceeded_every_game_played_nothing_past_the_deadline(duck, name):
    runs, base, model = duck
    sc = replace(SCENARIOS["kaggle"], budget_s=4 * 3600.0, n_games=40, slots=8)
    pol = make_policy(name, SchedulerConfig(slots=8))
    o = simulate(draw_duck(runs, 3, sc.n_games, model), pol, sc)
    assert o.max_holding <= 8 and o.unplayed == 0 and o.last_end <= sc.budget_s
    if name != "fixed":
        assert o.all_started_s < 20 * 60  # a first turn each, early
    # A game's levels count only up to the deadline: half the budget gives fewer.
    half = simulate(draw_duck(runs, 3, sc.n_games, model), make_policy(name, SchedulerConfig(slots=8)),
                    replace(sc, budget_s=sc.budget_s / 2))
    assert half.levels <= o.levels and half.tokens < o.tokens


def test_same_draws_whatever_the_policy_and_the_seed_alone_decides(duck):
    runs, base, model = duck
    turns = traces.pooled_turns(runs)
    a = [(g.game_id, g.run.pass_) for g in draw_duck(runs, 7, 30, model)]
    assert a == [(g.game_id, g.run.pass_) for g in draw_duck(runs, 7, 30, model)]
    assert a != [(g.game_id, g.run.pass_) for g in draw_duck(runs, 8, 30, model)]
    sc = replace(SCENARIOS["kaggle"], budget_s=3600.0, n_games=20, slots=4)
    for draw in (lambda: draw_duck(runs, 2, 20, model), lambda: synthetic.draw_synthetic(base, turns, 2, 20)):
        one = simulate(draw(), make_policy("ucb", SchedulerConfig(slots=4)), sc)
        two = simulate(draw(), make_policy("ucb", SchedulerConfig(slots=4)), sc)
        assert one.per_game_scores == two.per_game_scores and one.tokens == two.tokens


def half_tokens(q: float = synthetic.Q_COMPLETE, sigma: float = synthetic.TOKEN_SIGMA, step: float = 500.0):
    """Tokens spent on a level at which its chance of still being completed has halved,
    pooled over levels 1-6 (attempts reaching level l weigh q^(l-1))."""
    m = np.asarray(synthetic.LEVEL_TOKENS, dtype=float)
    w = q ** np.arange(len(m))

    def rel(t: float) -> float:
        s = np.array([0.5 * math.erfc((math.log(t) - math.log(x)) / sigma / math.sqrt(2)) for x in m])
        return float((w * q * s).sum() / (w * (q * s + 1 - q)).sum() / q)
    t = step
    while rel(t) > 0.5:
        t += step
    return t


def test_synthetic_games_have_the_field_medians_and_fall_off(duck):
    _, base, _ = duck
    assert half_tokens() == pytest.approx(62_000, rel=0.1)  # published: half at 62K
    need = {lv: [] for lv in range(3)}
    done = 0
    for seed in range(600):
        g = synthetic.SyntheticGame(0, "x", base["ar25-0c556536"], [(1000, 1500)], seed)
        if g.completes:
            need[0].append(g.t_need)
        done += g.completes
    assert np.median(need[0]) == pytest.approx(27_000, rel=0.1)
    assert done / 600 == pytest.approx(synthetic.Q_COMPLETE, abs=0.08)
    g = synthetic.SyntheticGame(0, "x", (5, 5), [(1000, 1500)], 1)
    turns = [t for t in (g.next_turn() for _ in range(2000)) if t is not None]
    assert all(b[2] >= a[2] and b[3] >= a[3] for a, b in zip(turns, turns[1:]))  # counts only grow


def test_context_for_slots_follows_the_memory_plan():
    assert compare.context_for_slots(10) == (131_072, 12_288)  # the profile's own
    ctx, cap = compare.context_for_slots(16)
    assert 60_000 < ctx < 131_072 and cap <= ctx // 4 + 1


def test_cli_compare_prints_every_policy_and_s_on_both_curve_sets(small, capsys):
    runs_path, base_path, _ = small
    rc = cli_main(["simulate", "--runs", str(runs_path), "--baselines", str(base_path), "--scenario", "30min",
                   "--seeds", "2", "--games", "6", "--slots", "2,3", "--compare"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    for cs in ("duck", "synthetic"):
        assert doc[cs]["assumes"]
        for s in ("S=2", "S=3"):
            for name in ("field", "ucb", "adaptive", "fixed"):
                r = doc[cs][s][name]
                assert set(r["expected_score"]) == {"mean", "ci95"} and "idle_slot_share" in r
                assert r["unplayed_games"]["mean"] == 0
            assert "score" in doc[cs][s]["adaptive"]["minus_field"]
    assert isinstance(doc["beats_field_everywhere"], list)
    assert set(doc["beats_field_on_every_curve_set"]) == {"S=2", "S=3"}
    cli_main(["simulate", "--runs", str(runs_path), "--baselines", str(base_path), "--scenario", "30min",
              "--seeds", "2", "--games", "6", "--slots", "2", "--compare", "--markdown"])
    table = capsys.readouterr().out
    assert table.startswith("| curves | S | policy |") and table.count("\n") == 2 + 2 * 4  # header, rule, 2 sets x 4 policies


def test_cli_one_policy_and_the_kaggle_scenario(small, capsys):
    runs_path, base_path, _ = small
    rc = cli_main(["simulate", "--runs", str(runs_path), "--baselines", str(base_path), "--policy", "fixed",
                   "--scenario", "kaggle", "--seeds", "2", "--games", "6", "--slots", "3"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["duck"]["policy"] == "fixed" and "extension_model" in doc
    assert doc["score_recompute"]["agree"] == doc["runs"] == 12
    assert math.isfinite(doc["duck"]["expected_score"]["mean"])


def test_the_documented_command_finds_its_baselines_without_the_flag(duck, capsys):
    """`duck simulate --runs ../shared/duck-traces/runs.jsonl ...` (docs/commands.md) takes the human
    baselines from environment_files/ or ../shared/public-games.json wherever devkit lives."""
    assert curves.default_baselines_path() in (curves.PUBLIC_GAMES, PUBLIC_GAMES)
    rc = cli_main(["simulate", "--runs", str(TRACES), "--policy", "fixed", "--scenario", "kaggle", "--seeds", "1",
                   "--games", "4", "--slots", "2"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["duck"]["policy"] == "fixed"


def test_cli_set_is_validated_like_the_config(small, capsys):
    runs_path, base_path, _ = small
    base = ["simulate", "--runs", str(runs_path), "--baselines", str(base_path), "--seeds", "2", "--games", "6",
            "--slots", "2"]
    assert cli_main(base + ["--set", "stall_factor=3", "--set", "ucb.exploration=0.1",
                            "--set", "first_turns=false"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scheduler_overrides"] == {"adaptive.stall_factor": 3.0, "ucb.exploration": 0.1, "first_turns": False}
    assert cli_main(base + ["--set", "stal_s=600"]) == 2
    assert "scheduler.adaptive.stal_s: unknown field" in capsys.readouterr().err
