"""The one config surface: files, environment variables and overrides, validated."""

from __future__ import annotations

import pydantic
import pytest

from duck.config import Config, load_config


def test_defaults_are_valid():
    assert load_config(env={}) == Config()


def test_files_then_env_then_overrides(tmp_path):
    (tmp_path / "a.toml").write_text('[play]\nseed = 3\nmax_actions = 50\n[model]\nurls = ["http://x/v1"]\n')
    (tmp_path / "b.json").write_text('{"play": {"seed": 4}}')
    cfg = load_config([tmp_path / "a.toml", tmp_path / "b.json"],
                      ["play.max_actions=70", "agent.keep_notes_on_game_over=false"],
                      env={"DUCK_PLAY__WORKERS": "2", "DUCK_PLAY__MAX_ACTIONS": "60", "OTHER": "x"})
    assert cfg.play.seed == 4  # the later file wins
    assert cfg.play.workers == 2  # from the environment
    assert cfg.play.max_actions == 70  # the override beats the environment
    assert cfg.model.urls == ["http://x/v1"]
    assert cfg.agent.keep_notes_on_game_over is False


@pytest.mark.parametrize("override", ["play.nope=1", "nosection.x=1", "play.max_actions=lots"])
def test_a_wrong_key_or_value_is_a_clear_error(override):
    with pytest.raises(pydantic.ValidationError):
        load_config(overrides=[override], env={})


def test_an_override_without_equals_is_refused():
    with pytest.raises(ValueError, match="a.b=value"):
        load_config(overrides=["play.seed"], env={})
