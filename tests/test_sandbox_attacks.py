"""The sandbox as a boundary (issue 14): the attack snippets of tests/attacks.py against a real
kernel on a copy of a bundled game with a canary planted in its source and solution.

Here each snippet's tool message is checked one by one (nothing escaped, no canary, the
kernel alive afterwards, restarted when the host had to); tests/test_attacks_play.py runs the
same snippets through `duck stub-server` and `duck play --policy llm`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from attacks import ATTACKS
from conftest import BUNDLED, ROOT, alive
from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.play.record import RecordWriter, read_record
from duck.play.session import Session
from duck.sandbox import isolation
from duck.sandbox.confine import closed_ancestor
from duck.sandbox.host import Kernel


def canary_games(dst: Path, game: str = "zs01") -> tuple[Path, str]:
    """A copy of one bundled game whose source and solution hold a unique canary string."""
    canary = f"CANARY-{uuid.uuid4().hex}"
    shutil.copytree(BUNDLED / game, dst / game)
    for py in (dst / game).rglob("*.py"):
        py.write_text(py.read_text() + f"\n# {canary}\n")
    for sol in (dst / game).rglob("solution.json"):
        doc = json.loads(sol.read_text())
        sol.write_text(json.dumps(doc | {"note": canary}))
    return dst, canary


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    return s


def accepted(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
        return True
    except BlockingIOError:
        return False


@pytest.fixture
def attacked_kernel(tmp_path):
    games, canary = canary_games(tmp_path / "games")
    source = GameSource.offline(games)
    gid = source.game_ids()[0]
    g = source.make(gid)
    (tmp_path / "records").mkdir()
    writer = RecordWriter(tmp_path / "records" / f"{gid}.jsonl")
    writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
    k = Kernel(Session(g, writer, max_actions=200), KernelConfig(call_timeout_s=3.0, memory_mb=1024))
    k.start()
    yield k, games, canary
    k.close()


def _check(k: Kernel, attack, where: dict, canary: str) -> None:
    r = k.run(attack.render(**where))
    text = r.text
    assert "ESCAPED" not in text, f"{attack.name}: {text[:1500]}"
    assert canary not in text, attack.name
    if attack.restarts:
        assert r.restarted, f"{attack.name}: {text[:800]}"
    json.dumps(r.message).encode("utf-8")  # any string the worker sent is valid text now
    alive(k)


FAST = [a for a in ATTACKS if not a.slow]


@pytest.mark.parametrize("attack", FAST, ids=[a.name for a in FAST])
def test_attack_is_contained(attacked_kernel, attack):
    k, games, canary = attacked_kernel
    port = listener()
    _check(k, attack, {"repo": str(ROOT), "games": str(games), "port": port.getsockname()[1]}, canary)
    assert not accepted(port), "a TCP connection reached the host's machine"
    if k.lease:  # nothing of the worker's uid but the worker itself
        assert isolation.pids_of_uid(k.lease.uid) == [k.proc.pid]


@pytest.mark.slow
def test_a_worker_that_stops_reading_cannot_hang_the_host(attacked_kernel):
    k, games, canary = attacked_kernel
    attack = next(a for a in ATTACKS if a.name == "stop-reading-the-pipe")
    _check(k, attack, {"repo": str(ROOT), "games": str(games), "port": 1}, canary)


def test_every_layer_is_reported_and_applied(attacked_kernel):
    """On this machine (root, Linux with Landlock, libseccomp, namespaces) every layer is on;
    the worker's own report is in the record, the machine's in the header."""
    k, _, _ = attacked_kernel
    report = isolation.report()
    if os.geteuid() != 0:
        pytest.skip("the uid and namespace layers need root")
    assert all(v.startswith("on") for v in report.values()), report
    assert all(v.startswith("on") for v in k.layers.values()), k.layers
    rec = read_record(k.session.writer.path)
    assert rec.header["sandbox"] == report
    ev = next(e for e in rec.events if e["kind"] == "sandbox")
    assert ev["data"] == k.layers


def test_restart_keeps_the_game_and_says_why(attacked_kernel):
    k, games, _ = attacked_kernel
    k.run("keep = 1\nr = action('UP')")
    before = len(k.entries)
    attack = next(a for a in ATTACKS if a.name == "forged-done-with-bad-types")
    r = k.run(attack.render(repo=str(ROOT), games=str(games), port=1))
    assert r.kind == "crash" and r.restarted and "protocol violation" in r.message["error"]
    r = k.run("print(len(history), 'keep' in globals())")
    assert r.stdout == f"{before} False\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the fallback of interest is root without Landlock or namespaces")
def test_fallback_without_landlock_and_namespaces(tmp_path):
    """Layers turned off (`kernel.layers_off`) as on a machine without them: seccomp still
    stands; the host measures the temp dir (a restart past `kernel.disk_mb`) and ends a thread
    that outlives its call; where the Python installation is open to other users (Kaggle's),
    the uid stands too and file modes keep a root-only games copy and records folder closed.
    Where it is not (pyenv under /root, as here), the uid layer says so and is off."""
    games, canary = canary_games(tmp_path / "private" / "games")
    (tmp_path / "private").chmod(0o700)  # what duck.run's root-only copy is
    source = GameSource.offline(games)
    g = source.make(source.game_ids()[0])
    (tmp_path / "private" / "records").mkdir()
    writer = RecordWriter(tmp_path / "private" / "records" / "r.jsonl")
    writer.header(game_id=g.game_id, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
    cfg = KernelConfig(call_timeout_s=3.0, memory_mb=1024, disk_mb=40, layers_off=["landlock", "namespaces"])
    closed = [p for p in isolation.python_paths() if closed_ancestor(p)]
    where = {"repo": str(ROOT), "games": str(games), "port": 1}
    with Kernel(Session(g, writer, max_actions=50), cfg) as k:
        k.start()
        assert k.layers["filesystem"] == "off: turned off" and k.layers["mounts"] == "off: turned off"
        assert k.layers["seccomp"].startswith("on") and k.layers["disk_quota"].startswith("on: the host")
        for name in ("children-outlive-the-call", "tcp-to-local-port", "ctypes-kill-parent", "renice-parent"):
            _check(k, next(a for a in ATTACKS if a.name == name), where, canary)
        if closed:
            assert k.layers["uid"].startswith("off: the Python installation")
            r = k.run("import sys\nsys.modules['_thread'].start_new_thread(sys.modules['time'].sleep, (1000,))")
            assert r.restarted and "thread" in r.message["kernel"]
        else:
            assert k.layers["uid"].startswith("on") and isolation.relies_on_file_modes(cfg.layers_off)
            for name in ("walk-played-games", "append-forged-level-lines", "threads-outlive-the-call",
                         "edit-the-checkout"):
                _check(k, next(a for a in ATTACKS if a.name == name), where, canary)
        r = k.run("for i in range(20):\n    open(f'f{i}', 'wb').write(b'0' * (8 << 20))")
        assert r.restarted and "disk quota of 40 MB" in r.text
        alive(k)
