"""The attack snippets through the production path (issue 14, "done when"): `duck stub-server
--replies FILE` serves every snippet of tests/attacks.py as the model's code, `duck play
--policy llm` plays a copy of a bundled game with a canary in its source, and afterwards:

* the host finished normally and every snippet was asked for (one `model` event each);
* score.json's score equals the toolkit's scorecard, for the game and overall;
* the canary is nowhere in the run's outputs (records, score.json, stdout, stderr);
* no process is left behind (none of a sandbox uid, none naming the run folder);
* the checkout and the played games are unchanged (git status and every file's hash);
* no TCP connection reached the port the snippets were told about.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attacks import ATTACKS
from conftest import ROOT
from duck.play.record import read_records
from duck.sandbox import isolation
from test_sandbox_attacks import accepted, canary_games, listener

DUCK = str(Path(sys.executable).parent / "duck")


def tree_hash(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and not p.is_symlink() and not rel.startswith(skip):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def checkout_state() -> tuple[str, dict[str, str]]:
    status = subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=ROOT, capture_output=True,
                            text=True).stdout
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout
    hashes = {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest()
              for f in tracked.split("\0") if f and (ROOT / f).is_file()}
    return status, hashes


def sandbox_pids() -> set[int]:
    pids = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            uid = isolation._status_field(name, "Uid:")
            if uid and isolation.UID_BASE <= int(uid.split()[0]) < isolation.UID_BASE + isolation.UID_SLOTS:
                pids.add(int(name))
    return pids


def naming(text: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if text in Path(f"/proc/{name}/cmdline").read_bytes().decode("utf-8", "replace"):
                    out.append(int(name))
            except OSError:
                pass
    return out


@pytest.mark.slow
def test_attack_snippets_through_duck_play(tmp_path):
    games, canary = canary_games(tmp_path / "games")
    games_before = tree_hash(games)
    checkout_before = checkout_state()
    strays_before = sandbox_pids()
    port = listener()
    where = {"repo": str(ROOT), "games": str(games), "port": port.getsockname()[1]}
    replies = [{"content": f"Trying {a.name}.", "code": a.render(**where)} for a in ATTACKS]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    server = subprocess.Popen([DUCK, "stub-server", "--port", "0", "--replies", str(tmp_path / "replies.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = json.loads(server.stdout.readline())["url"]
        out = tmp_path / "run"
        play = subprocess.run([DUCK, "play", "--games", str(games), "--policy", "llm", "--model-url", url,
                               "--max-actions", "40", "--out", str(out),
                               "--set", "kernel.call_timeout_s=3", "model.retries=0", "model.backoff_s=0.01"],
                              capture_output=True, text=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert play.returncode == 0, play.stderr[-3000:]

    (rec,) = read_records(out)
    assert rec.end is not None and not rec.problems
    assert sum(e["kind"] == "model" for e in rec.events) >= len(ATTACKS)  # every snippet was run
    assert all(v.startswith("on") for v in rec.header["sandbox"].values()) or os.geteuid() != 0

    score = json.loads((out / "score.json").read_text())
    assert score["disagrees"] == [] and "toolkit_score" in score
    assert score["score"] == pytest.approx(score["toolkit_score"], abs=1e-9)
    game = score["games"][rec.game_id]
    assert game["score"] == pytest.approx(game["toolkit_score"], abs=1e-9)

    outputs = [play.stdout, play.stderr] + [p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()]
    assert not any(canary in text for text in outputs), "the game's source leaked into the run's outputs"
    assert not accepted(port), "a TCP connection reached the host's machine"
    assert sandbox_pids() - strays_before == set(), "a sandboxed process outlived duck play"
    assert naming(str(out)) == [], "a process naming the run folder outlived duck play"
    assert tree_hash(games) == games_before
    assert checkout_state() == checkout_before


def test_one_attack_through_duck_play(tmp_path):
    """The default suite's quick version: three attacks that used to break the host (a forged
    record line through /proc, a kill of the host, a lone surrogate in notes) end in a normal run."""
    games, canary = canary_games(tmp_path / "games")
    where = {"repo": str(ROOT), "games": str(games), "port": 1}
    picked = [a for a in ATTACKS if a.name in ("proc-parent-fd", "ctypes-kill-parent", "lone-surrogates-everywhere",
                                                "walk-played-games")]
    (tmp_path / "replies.json").write_text(json.dumps([{"content": a.name, "code": a.render(**where)} for a in picked]))
    server = subprocess.Popen([DUCK, "stub-server", "--port", "0", "--replies", str(tmp_path / "replies.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = json.loads(server.stdout.readline())["url"]
        play = subprocess.run([DUCK, "play", "--games", str(games), "--policy", "llm", "--model-url", url,
                               "--max-actions", "10", "--out", str(tmp_path / "run"),
                               "--set", "model.retries=0", "model.backoff_s=0.01"],
                              capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert play.returncode == 0, play.stderr[-2000:]
    score = json.loads((tmp_path / "run" / "score.json").read_text())
    assert score["disagrees"] == [] and score["score"] == pytest.approx(score["toolkit_score"], abs=1e-9)
    assert not any(canary in p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file())
