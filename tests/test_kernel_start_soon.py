"""Kernel.start_soon(): the worker starts in the background while the first model request is out."""

from __future__ import annotations

import os
import time

from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.play.record import RecordWriter
from duck.play.session import Session
from duck.sandbox.host import Kernel


def _kernel(tmp_path, bundled, name: str) -> Kernel:
    source = GameSource.offline(bundled)
    game = source.make(source.game_ids(["zs01"])[0])
    writer = RecordWriter(tmp_path / f"{name}.jsonl")
    writer.header(game_id=game.game_id, title=game.title, baselines=game.baselines, obs=game.obs,
                  policy="test", seed=0)
    return Kernel(Session(game, writer, max_actions=100), KernelConfig(call_timeout_s=10))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_first_call_uses_the_worker_started_in_the_background(tmp_path, bundled):
    k = _kernel(tmp_path, bundled, "soon")
    try:
        k.start_soon()
        deadline = time.monotonic() + 30
        while k.proc is None and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = k.proc.pid
        r = k.run("print(current_frame.shape, len(history))")
        assert r.kind == "ok" and "(64, 64) 1" in r.stdout, r.text
        assert k.proc.pid == pid and not r.restarted  # no second worker
        k.start_soon()  # a started kernel is left alone
        assert k.proc.pid == pid
    finally:
        k.close()
    assert k.proc is None and _gone(pid)


def test_closing_while_the_worker_starts_leaves_no_process(tmp_path, bundled):
    k = _kernel(tmp_path, bundled, "close")
    k.start_soon()
    k.close()  # waits for the start, then ends the worker
    assert k.proc is None
    r = k.run("print('again')")  # a closed kernel starts afresh on the next call, as before
    try:
        assert r.kind == "ok" and "again" in r.stdout
    finally:
        k.close()
