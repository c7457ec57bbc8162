"""Shared fixtures: the bundled games, the public games when present, a fresh run folder, a
kernel on a bundled game (closed at the end of each test)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.play.record import RecordWriter
from duck.play.session import Session
from duck.sandbox.host import Kernel

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "tests" / "games"
BROKEN = ROOT / "tests" / "fixtures" / "broken_games"
PUBLIC = ROOT / "environment_files"
# A test that runs past this is hung: it fails with its name and where it stood, instead of a CI
# whose own 90-minute limit ends the whole suite without a word (an agent run that never acted did).
CEILING_S = float(os.environ.get("DUCK_TEST_CEILING_S", "900"))


@pytest.fixture(autouse=True)
def _ceiling(request):
    def hung(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} ran past {CEILING_S:g} s (tests/conftest.py's ceiling): "
                           "hung")
    before = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, CEILING_S)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)


def solutions() -> dict[str, list[list[list[int]]]]:
    """game_id -> per-level winning action lists, from each bundled game's solution.json."""
    out = {}
    for meta in sorted(BUNDLED.rglob("metadata.json")):
        sol = meta.parent / "solution.json"
        if sol.exists():
            out[json.loads(meta.read_text())["game_id"]] = json.loads(sol.read_text())["levels"]
    return out


@pytest.fixture
def bundled() -> Path:
    return BUNDLED


@pytest.fixture
def public() -> Path:
    if not any(PUBLIC.rglob("metadata.json")):
        pytest.skip("public games not fetched into environment_files/")
    return PUBLIC


@pytest.fixture
def games_with_broken(tmp_path: Path) -> Path:
    """The bundled games plus a game whose module raises on construction."""
    dst = tmp_path / "games"
    shutil.copytree(BUNDLED, dst)
    shutil.copytree(BROKEN, dst, dirs_exist_ok=True)
    return dst


@pytest.fixture
def make_kernel(tmp_path: Path):
    made: list[Kernel] = []

    def make(game: str = "zs01", timeout: float = 5.0, memory_mb: int = 1024, kernel: type = Kernel,
             grace: float | None = None, **kw: Any) -> Kernel:
        source = GameSource.offline(BUNDLED)
        gid = next(g.game_id for g in source.games() if g.game_id.startswith(game))
        g = source.make(gid)
        writer = RecordWriter(tmp_path / f"{gid}-{len(made)}.jsonl")
        writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
        session = Session(g, writer, max_actions=1000)
        k = kernel(session, KernelConfig(call_timeout_s=timeout, memory_mb=memory_mb, **({} if grace is None else {"grace_s": grace})), **kw)
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
