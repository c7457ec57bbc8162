"""A kernel on a bundled game, for the kernel tests (closed at the end of each test).
Named test_* only to sit with the kernel tests; it holds no tests itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.sandbox.host import Kernel
from duck.play.session import Session
from duck.play.record import RecordWriter

BUNDLED = Path(__file__).resolve().parent / "games"


@pytest.fixture
def make_kernel(tmp_path: Path):
    made: list[Kernel] = []

    def make(game: str = "zs01", timeout: float = 5.0, memory_mb: int = 1024, **kw: Any) -> Kernel:
        source = GameSource.offline(BUNDLED)
        gid = next(g.game_id for g in source.games() if g.game_id.startswith(game))
        g = source.make(gid)
        writer = RecordWriter(tmp_path / f"{gid}-{len(made)}.jsonl")
        writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
        session = Session(g, writer, max_actions=1000)
        k = Kernel(session, KernelConfig(call_timeout_s=timeout, memory_mb=memory_mb), **kw)
        k.start()
        made.append(k)
        return k

    yield make
    for k in made:
        k.close()


def alive(k: Kernel) -> None:
    """The kernel answers and still has the game variables."""
    r = k.run("print(len(history), current_frame.shape, type(valid_actions).__name__)")
    assert r.kind == "ok", r.text
    assert "(64, 64) list" in r.stdout
