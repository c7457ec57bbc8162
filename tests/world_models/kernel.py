"""A kernel with the world-model tools as the agent gets it (duck.policies.world_model_kernel:
the explorer behind explore(n)), on one game of a folder, recording to `record_dir`."""

from __future__ import annotations

from pathlib import Path

from duck.config import KernelConfig, load_config
from duck.game.source import Game, GameSource
from duck.play.record import RecordWriter
from duck.play.session import Session
from duck.sandbox.host import Kernel
from duck.policies import world_model_kernel


def open_tools_kernel(games_dir: Path, game: str, record_dir: Path, max_actions: int,
                      timeout: float, suffix: str = "") -> tuple[Kernel, Game, Path]:
    """(kernel, game, record path); the caller closes the kernel."""
    source = GameSource.offline(games_dir)
    gid = source.game_ids([game])[0]
    g = source.make(gid)
    path = record_dir / f"{gid}{suffix}.jsonl"
    writer = RecordWriter(path)
    writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
    kernel = world_model_kernel(load_config(), seed=0)(Session(g, writer, max_actions=max_actions),
                                                       KernelConfig(call_timeout_s=timeout))
    return kernel, g, path
