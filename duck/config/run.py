"""The sections of a run: what `duck play` plays (`play`), the explorer policy's options
(`explorer`), and the Kaggle notebook's paths and time budget (`kaggle`: its budgets and
`margin_s` are the only time knobs; everything else is derived from them). Part of the one
config surface (duck.config, which re-exports them; its rules hold here).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from duck.config.load import Section


PolicyName = Literal["random", "explorer", "llm"]  # what duck.policies.make_policy knows


def _policy_spec(value: str) -> str:
    """A policy by name, or a user's policy class in a file: `path/to/file.py:ClassName`
    (duck.policies.load_policy_file; `duck play --policy`)."""
    if value in get_args(PolicyName):
        return value
    path, sep, cls = value.rpartition(":")
    if not sep or not path.endswith(".py") or not cls.isidentifier():
        raise ValueError(f"a policy is one of {', '.join(get_args(PolicyName))} or FILE.py:ClassName")
    return value


PolicySpec = Annotated[str, AfterValidator(_policy_spec)]


class PlayConfig(Section):
    games_dir: str = "environment_files"  # the public games, fetched (see the README)
    policy: PolicySpec = "explorer"  # the non-LLM default: runs anywhere, no GPU; or FILE.py:ClassName
    seed: int = 0
    max_actions: PositiveInt = 1000  # per game; ~7x the Duck's mean of 137 actions per game
    workers: PositiveInt = 1  # parallel game processes (the engine is pure Python under the GIL)
    conversations: bool = True  # a model-played game writes its conversation (duck.play.conversation)
    # `duck play --policy llm` when no model server answers: False, an error before anything
    # plays (a run that quietly played the explorer instead reads like a model's score); True,
    # agent.fallback plays every game and the progress line and the summary say so.
    model_fallback: bool = False


class ExplorerConfig(Section):
    """duck.explorer.policy.Explorer's options (`--set explorer.nav=false`); the defaults are
    the benchmarked ones (`duck bench explorer`, experiments/LOG.md)."""

    level_cap: PositiveInt | None = None  # actions on one level before giving up on the game (None: no cap)
    max_clicks: NonNegativeInt = 64  # click targets kept per state (duck.explorer.vision)
    novelty: float = 1.0  # rank cost per doubling of a click's tries on this level
    key_novelty: float = 0.0  # the same for a key
    key_dud: float = 2.0  # rank cost per try of a key that never changed anything (clicks: 4)
    test_bonus: float = 1.5  # rank bonus of a "test" action (an animation back to the same state)
    known_penalty: float = 2.5  # rank cost of an action predicted to lead to a known state
    trace: bool = False  # keep the reason of each action in the record's `info`
    # The navigator (duck.explorer.nav) in keyboard games: walks the avatar to goal-like objects.
    nav: bool = True
    nav_budget: NonNegativeInt = 300  # its walking budget per level (half on level 1)
    nav_yield: float = 0.5  # it yields to a non-move action of this very state costing at most this
    nav_frontier: float | None = 6.0  # its cost of walking to a place never stood on (None: never)
    nav_space: bool = True  # it tries SPACE once where a target was touched
    # It hands the turn back once it would walk from one place more than this often with no
    # new state seen since (None: off).
    nav_loop: PositiveInt | None = 2
    feedback: bool = True  # paint a mark drawn around the last click out of the board once one is found
    key_give_up: PositiveInt | None = 8  # tries of a key that never changed anything: behind every click
    # Tries of one click (same object, same place) that never changed anything on this level
    # before it goes back (None: never).
    spot_dud: PositiveInt | None = 3
    twin_cost: float = 6.0  # rank cost of a click whose twin was tried in this state (0: off)


class KaggleConfig(Section):
    """The Kaggle notebook (duck/kaggle/run.py): where things are, how long the run may take."""

    input_dir: str = "/kaggle/input"  # attached competition data, datasets and models
    working_dir: str = "/kaggle/working"  # Kaggle keeps what is written here as the output
    competition_dir: str = ""  # "": the folder under input_dir with environment_files/
    dataset_dir: str = ""  # our wheels; "": the folder under input_dir holding duck-dataset.json
    model_dir: str = ""  # the weights; "": the folder under input_dir whose config.json fits
    vllm_env_dir: str = "/tmp/vllm-env"  # vLLM's own venv: its numpy pin conflicts with ours
    gateway_url: str = "http://gateway:8001/"  # the rerun's gateway (DESIGN §1)
    api_key: str = "test-key-123"
    gateway_wait_s: NonNegativeFloat = 600.0  # the official starter waits this long for /api/games
    budget_s: PositiveFloat = 9 * 3600.0  # the rerun: Kaggle's limit for the whole notebook, from its first cell
    interactive_budget_s: PositiveFloat = 2700.0  # any other run: install, vLLM, ~20 min of public games
    # Both modes: the games' deadline is this long before the budget's end (the notebook waits
    # a third of it for them: stop_grace_s). A game stopped there returns after at most one model
    # request (model.timeout_s) plus one kernel call; then records, the scorecard and vLLM's
    # teardown. About three times that worst case, for a day's submission.
    margin_s: NonNegativeFloat = 900.0
    interactive_games: NonNegativeInt = 0  # 0: every public game; N: the first N (a quicker check)
    use_model: bool = True  # False: the explorer only (no GPU, or a safe submission)
    health_interval_s: PositiveFloat = 30.0  # a 1-token chat this often tells a wedged server
    health_timeout_s: PositiveFloat = 120.0  # under 28 streams a 1-token request still lands in time
    health_failures: PositiveInt = 2  # consecutive failed probes before the server counts as down
    # The server's restarts on the profile's ladder (duck.kaggle.serving; docs/serving.md,
    # "Restarts in the notebook"); `duck doctor --soak` says the start rung (0 or 1), and the
    # field saw MTP crash within ~20 min of ready (climb_within_s).
    restart: bool = True
    restart_min_left_s: NonNegativeFloat = 3600.0
    start_rung: NonNegativeInt = 0
    climb_within_s: NonNegativeFloat = 1800.0
    # MTP's acceptance, read from /metrics once the server generated `mtp_check_tokens`: fewer
    # tokens a step than `min_mtp_tokens_per_step` (an untrained draft head gave ~1.5; FIELD §4
    # measured 2.6-2.9) restarts the server a rung up (MTP off).
    min_mtp_tokens_per_step: NonNegativeFloat = 1.5
    mtp_check_tokens: PositiveInt = 20000

    @model_validator(mode="before")
    @classmethod
    def _retired_restarts(cls, data: Any) -> Any:
        """`model_restarts` (a count, before the ladder): 0 still means no restart; any other
        count now means restarts while time allows (a warning says so)."""
        if isinstance(data, dict) and "model_restarts" in data:
            data = dict(data)
            n = data.pop("model_restarts")
            data.setdefault("restart", str(n).strip() not in ("0", "0.0", "False", "false"))
            logging.getLogger("duck.config").warning(
                "kaggle.model_restarts is retired: the server restarts while time allows (kaggle.restart=%s)",
                data["restart"])
        return data

    @model_validator(mode="after")
    def _margin_inside_budgets(self) -> "KaggleConfig":
        if self.margin_s >= min(self.budget_s, self.interactive_budget_s):
            raise ValueError(f"margin_s ({self.margin_s:g}) must be less than budget_s ({self.budget_s:g}) "
                             f"and interactive_budget_s ({self.interactive_budget_s:g})")
        return self

    @property
    def stop_grace_s(self) -> float:
        """How long past the deadline the notebook waits for games to return (then gives up
        on them): a third of the margin, one worst-case stop with room; the rest is teardown."""
        return self.margin_s / 3
