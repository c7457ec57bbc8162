"""Run records: written line by line, readable after a crash, compact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from duck.game.actions import Action
from duck.game.source import Observation
from duck.play.record import RecordWriter, pack_grid, read_record, read_records, unpack_grid


def _obs(v: int, levels: int = 0, n_frames: int = 1) -> Observation:
    g = np.full((64, 64), v, dtype=np.int8)
    return Observation([g] * n_frames, "NOT_FINISHED", levels, 3, [1, 2, 6])


def test_grid_roundtrip_and_compactness():
    rng = np.random.default_rng(0)
    g = np.zeros((64, 64), dtype=np.int8)
    g[10:20, 5:30] = 3
    g[40, :] = rng.integers(0, 16, 64)
    text = pack_grid(g)
    assert len(text) < 400
    assert np.array_equal(unpack_grid(text), g)


def test_lines_are_flushed_before_the_next_action(tmp_path):
    w = RecordWriter(tmp_path / "g.jsonl")
    w.header(game_id="g-1", title="G", baselines=[3], obs=_obs(0), policy="p", seed=1)
    w.action(1, Action(1), _obs(1, n_frames=4))
    # Read while the writer is still open: the line is already on disk.
    rec = read_record(tmp_path / "g.jsonl")
    assert [a["i"] for a in rec.actions] == [1]
    assert rec.actions[0]["frames"] == 4 and rec.end is None
    w.action(2, Action.click(5, 7), _obs(1))  # same board: no grid stored again
    w.end("max_actions", 0, 2, "NOT_FINISHED")
    rec = read_record(tmp_path / "g.jsonl")
    assert "grid" not in rec.actions[1] and rec.actions[1]["action"] == [6, 5, 7]
    grids = list(rec.grids())
    assert [i for i, _ in grids] == [0, 1, 2] and grids[2][1][0, 0] == 1
    assert rec.end["reason"] == "max_actions"


def test_torn_last_line_keeps_everything_before_it(tmp_path):
    w = RecordWriter(tmp_path / "g.jsonl")
    w.header(game_id="g-1", title="G", baselines=[3], obs=_obs(0), policy="p", seed=1)
    for i in range(1, 6):
        w.action(i, Action(2), _obs(i))
    w.close()
    with open(tmp_path / "g.jsonl", "a") as f:
        f.write('{"type":"action","i":6,"act')  # killed mid-write
    rec = read_record(tmp_path / "g.jsonl")
    assert [a["i"] for a in rec.actions] == [1, 2, 3, 4, 5]


def test_a_file_without_header_is_a_clear_error(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"type":"action","i":1}\n')
    with pytest.raises(ValueError, match="no header"):
        read_record(tmp_path / "x.jsonl")


def test_killed_run_keeps_every_recorded_action(bundled, tmp_path):
    """SIGKILL a real `duck play` mid-game: every record still parses up to its last action."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "duck.cli", "play", "--games", str(bundled),
                             "--policy", "random", "--max-actions", "10000000", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        files = list((out / "records").glob("*.jsonl"))
        if files and sum(f.stat().st_size for f in files) > 20_000:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    records = read_records(out)
    assert records, "nothing was recorded before the kill"
    live = next(r for r in records if r.end is None)  # the game being played when killed
    assert [a["i"] for a in live.actions] == list(range(1, len(live.actions) + 1))
    for line in (out / "records" / f"{live.game_id}.jsonl").read_text().splitlines()[:-1]:
        json.loads(line)  # every complete line is valid JSON


def test_an_actions_animation_frames_are_kept(tmp_path):
    """The frames before the final board (the report's player shows them): one zlib stream per
    action, a few dozen bytes for each frame after the first."""
    frames = [np.zeros((64, 64), dtype=np.int8) for _ in range(12)]
    for k, f in enumerate(frames):
        f[5, k:k + 3] = 9  # a sprite sliding right
    w = RecordWriter(tmp_path / "g.jsonl")
    w.header(game_id="g-1", title="G", baselines=[3], obs=_obs(0), policy="p", seed=1)
    w.action(1, Action(4), Observation(frames, "NOT_FINISHED", 0, 3, [1, 2, 3, 4]))
    w.action(2, Action(4), _obs(1))  # one frame: nothing more
    w.end("max_actions", 0, 2, "NOT_FINISHED")
    rec = read_record(tmp_path / "g.jsonl")
    anim = unpack_grid(rec.actions[0]["anim"])
    assert anim.shape == (11, 64, 64) and all(np.array_equal(a, f) for a, f in zip(anim, frames[:-1]))
    assert len(rec.actions[0]["anim"]) < 400 and "anim" not in rec.actions[1]
