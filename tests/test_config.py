"""The one config surface: files, environment variables and overrides, validated strictly."""

from __future__ import annotations

import pytest

from duck.cli import main
from duck.config import Config, ConfigError, load_config, with_values
from scheduler.policy import make_policy

from conftest import BUNDLED


def test_defaults_are_valid():
    assert load_config(env={}) == Config()


def test_files_then_env_then_overrides(tmp_path):
    (tmp_path / "a.toml").write_text('[play]\nseed = 3\nmax_actions = 50\n[model]\nurls = ["http://x/v1"]\n')
    (tmp_path / "b.json").write_text('{"play": {"seed": 4}}')
    cfg = load_config([tmp_path / "a.toml", tmp_path / "b.json"],
                      ["play.max_actions=70", "agent.guards=false"],
                      env={"DUCK_PLAY__WORKERS": "2", "DUCK_PLAY__MAX_ACTIONS": "60", "OTHER": "x"})
    assert cfg.play.seed == 4  # the later file wins
    assert cfg.play.workers == 2  # from the environment
    assert cfg.play.max_actions == 70  # the override beats the environment
    assert cfg.model.urls == ["http://x/v1"]
    assert cfg.agent.guards is False


@pytest.mark.parametrize("override, says", [
    ("play.nope=1", "play.nope: unknown field"),
    ("nosection.x=1", "nosection: unknown field"),
    ("play.max_actions=lots", "play.max_actions: Input should be a valid integer"),
    ("play.workers=0", "play.workers: Input should be greater than 0 (got 0)"),
    ("play.max_actions=-5", "play.max_actions: Input should be greater than 0 (got -5)"),
    ("kaggle.budget_s=-1", "kaggle.budget_s: Input should be greater than 0 (got -1)"),
    ("kaggle.margin_s=3000", "margin_s (3000) must be less than budget_s"),
    ("scheduler.slots=0", "scheduler.slots"),
    ("scheduler.policy=equal", "scheduler.policy: Input should be 'fixed', 'field', 'ucb' or 'adaptive'"),
    ("scheduler.adaptive.stal_s=5", "scheduler.adaptive.stal_s: unknown field"),
    ("scheduler.adaptive.stall_factor=-1", "scheduler.adaptive.stall_factor: Input should be greater than 0"),
    ("scheduler.ucb.slice_tokens=0", "scheduler.ucb.slice_tokens: Input should be greater than 0"),
    ("kaggle.stop_grace_s=4", "kaggle.stop_grace_s: unknown field"),  # derived from the margin now
])
def test_a_wrong_key_or_value_is_a_one_line_error(override, says):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[override], env={})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_an_override_without_equals_is_refused():
    with pytest.raises(ConfigError, match="a.b=value"):
        load_config(overrides=["play.seed"], env={})


def test_scheduler_thresholds_are_a_typed_section_settable_from_the_environment():
    cfg = load_config(env={"DUCK_SCHEDULER__ADAPTIVE__STALL_FACTOR": "3", "DUCK_SCHEDULER__POLICY": "fixed",
                           "DUCK_SCHEDULER__FIXED__ALLOT_S": "600"})
    assert cfg.scheduler.adaptive.stall_factor == 3.0 and cfg.scheduler.adaptive.stall_actions == 230
    policy = make_policy(cfg.scheduler.policy, cfg.scheduler)
    assert policy.name == "fixed" and policy.allotment(7200, 28, 110) == 600
    assert make_policy("adaptive", cfg.scheduler).config.stall_factor == 3.0


def test_one_margin_and_a_grace_derived_from_it():
    k = load_config(env={"DUCK_KAGGLE__MARGIN_S": "90"}).kaggle
    assert k.stop_grace_s == 30.0
    assert not {"stop_grace_s", "scheduler_overrides"} & set(type(k).model_fields)
    assert "budget_s" not in type(load_config(env={}).scheduler).model_fields  # the kaggle budget rules


def test_with_values_validates_like_load_config():
    cfg = load_config(env={})
    assert with_values(cfg, {"play.seed": 5, "model.urls": ["http://a"]}).play.seed == 5
    assert cfg.play.seed == 0  # a copy
    with pytest.raises(ConfigError, match="play.max_actions"):
        with_values(cfg, {"play.max_actions": 0})


@pytest.mark.parametrize("args, says", [
    (["--max-actions", "0"], "play.max_actions: Input should be greater than 0 (got 0)"),
    (["--max-actions", "-3"], "play.max_actions: Input should be greater than 0 (got -3)"),
    (["--workers", "0"], "play.workers: Input should be greater than 0 (got 0)"),
    (["--set", "kaggle.budget_s=-60"], "kaggle.budget_s: Input should be greater than 0"),
    (["--only", "zz99"], "no game named zz99"),
])
def test_duck_play_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, says):
    out = tmp_path / "run"
    assert main(["play", "--games", str(BUNDLED), "--out", str(out), *args]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.startswith("duck play: error: ")
    assert printed.err.strip().count("\n") == 0 and says in printed.err, printed.err
    assert not out.exists()


def test_the_explorer_section_is_typed_and_checked_when_the_config_loads():
    from duck.explorer.policy import Explorer
    from duck.policies import make_policy
    cfg = load_config(overrides=["explorer.nav=false", "explorer.key_give_up=null"], env={"DUCK_EXPLORER__NAV_LOOP": "3"})
    explorer = make_policy("explorer", 0, config=cfg)
    assert (explorer.options.nav, explorer.options.key_give_up, explorer.options.nav_loop) == (False, None, 3)
    assert Explorer(0).options == load_config(env={}).explorer  # one set of defaults: the section's
    for override, says in (("explorer.nav_lop=3", r"explorer.nav_lop: unknown field \(did you mean "),
                           ("plya.seed=1", r"plya: unknown field \(did you mean play\?\)"),
                           ("model.serve.max_model_le=9", r"did you mean model.serve.max_model_len\?"),
                           ("explorer.nav=maybe", "explorer.nav: Input should be a valid boolean"),
                           ("explorer.options={}", "explorer.options: unknown field")):  # the old untyped dict
        with pytest.raises(ConfigError, match=says):
            load_config(overrides=[override], env={})
    with pytest.raises(ConfigError, match=r"^nav_lop: unknown field \(did you mean nav_loop or nav_"):
        Explorer(0, nav_lop=3)  # a policy made in code is checked as a config is
    assert Explorer(0, cfg.explorer, nav=True).options.nav and Explorer(0, cfg.explorer).options.nav_loop == 3


def test_planned_fields_are_planned_anew_and_a_set_one_goes_into_the_plan():
    cfg = load_config(overrides=["scheduler.slots=3"], env={})
    assert "scheduler.slots" not in cfg.derived and cfg.plan.slots == 3 and "model.name" in cfg.derived
    other = with_values(cfg, {"model.profile": "qwen3.8-27b"})
    assert other.model.name == other.plan.served_name != cfg.model.name  # planned anew for the new profile
    assert other.scheduler.slots == 3 and other.model.serve.max_num_seqs == 4  # the set field stays; seqs follow it
    assert set(other.derived) == set(cfg.derived)
