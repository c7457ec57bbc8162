"""Ctrl-C, a second Ctrl-C, SIGTERM and a full disk during `duck play`, and `--resume` after
each (duck.run.interrupt, duck.run): the run stops cleanly with score.json marked partial and
every record intact, and the resumed run plays exactly the games that were missing or cut,
ending with the records an uninterrupted run writes.

The Ctrl-C tests drive `duck play` through a pseudo-terminal (pexpect): a real terminal, so
the live progress table is on and Ctrl-C is the terminal's SIGINT to the whole foreground
process group, the workers included."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BUNDLED
from smalldisk import small_tmpfs
from duck.play.record import read_record, read_records

pexpect = pytest.importorskip("pexpect")
DUCK = str(Path(sys.executable).parent / "duck")
ACTIONS = "800"  # zc01 plays all of them; zb01 and zs01 win in under 250
# The explorer, each action after $PACED_S seconds where a test must catch the run in progress: zc01
# then takes 4 s or more however fast the machine (800 actions: ~0.5-2 s unpaced); the reference
# and the resumes play at full speed, the same actions.
POLICY = f"{Path(__file__).parent / 'fixtures' / 'paced.py'}:PacedExplorer"
PACED = {**os.environ, "PACED_S": "0.005"}


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """The bundled games and two more versions of the click game: five games, three of them long."""
    root = tmp_path_factory.mktemp("games") / "games"
    shutil.copytree(BUNDLED, root)
    for v in ("00000002", "00000003"):
        shutil.copytree(root / "zc01" / "00000001", root / "zc01" / v)
        meta = root / "zc01" / v / "metadata.json"
        meta.write_text(meta.read_text().replace("zc01-00000001", f"zc01-{v}").replace("00000001\"", f"{v}\""))
    return root


@pytest.fixture(scope="module")
def reference(games, tmp_path_factory) -> dict[str, list]:
    """What an uninterrupted run records: per game, each action, the board it left, levels, state."""
    out = tmp_path_factory.mktemp("ref") / "run"
    r = subprocess.run([DUCK, "play", "--games", str(games), "--max-actions", ACTIONS, "--workers", "2",
                        "--policy", POLICY, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {rec.game_id: actions(rec) for rec in read_records(out)}


def actions(rec) -> list:
    return [(a["i"], a["action"], a["hash"], a["levels"], a["state"]) for a in rec.actions]


def spawn(games: Path, out: Path, policy: str = POLICY):
    return pexpect.spawn(DUCK, ["play", "--games", str(games), "--max-actions", ACTIONS, "--workers", "2",
                                "--policy", policy, "--out", str(out)], dimensions=(40, 160), timeout=300,
                         encoding="utf-8", codec_errors="replace", env=PACED)


def wait_for(child, cond, timeout: float = 240.0) -> None:
    """Poll `cond` while draining the terminal (a full pty would block the live display)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out waiting"
        try:
            child.expect(pexpect.TIMEOUT, timeout=0.1)
        except pexpect.EOF:
            pytest.fail(f"duck play ended early: {child.before[-2000:]}")


def lines(path: Path, text: str) -> int:
    try:
        return path.read_text().count(text)
    except OSError:
        return 0


def finish(child, timeout: float = 60.0) -> str:
    child.expect(pexpect.EOF, timeout=timeout)
    child.close()
    return child.before


def resume(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([DUCK, "play", "--resume", "--out", str(out), "--workers", "2"],
                          capture_output=True, text=True, timeout=600)


def strays(out: Path) -> list[int]:
    """Processes still naming this run folder on their command line (the workers are forks)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if str(out) in Path(f"/proc/{name}/cmdline").read_bytes().decode("utf-8", "replace"):
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def test_ctrl_c_stops_two_workers_cleanly_and_resume_completes_the_run(games, reference, tmp_path):
    out = tmp_path / "run"
    rec = out / "records"
    child = spawn(games, out)
    # zb01 (a short game) has finished and the first long game is well under way
    wait_for(child, lambda: lines(rec / "zb01-00000001.jsonl", '"type":"end"') == 1
             and lines(rec / "zc01-00000001.jsonl", '"type":"action"') >= 40)
    child.sendintr()
    t0 = time.monotonic()
    text = finish(child)
    assert child.exitstatus == 130 and time.monotonic() - t0 < 20  # the queued games did not play on
    assert "stopping" in text and "interrupted (Ctrl-C)" in text and "--resume" in text
    assert "Traceback" not in text and not strays(out)

    doc = json.loads((out / "score.json").read_text())
    assert doc["partial"] is True and doc["run_status"] == "interrupted"
    finished = {r.game_id for r in read_records(out) if r.end and r.end["reason"] in ("won", "max_actions")}
    assert "zb01-00000001" in finished and "zc01-00000001" in doc["unfinished"]
    assert doc["missing"]  # the queued games never started: no record at all
    assert set(doc["missing"]) | set(doc["unfinished"]) | finished == set(reference)
    for r in read_records(out):  # every record intact: no torn line, actions 1..n, an end line
        assert not r.problems and r.end is not None, r.game_id
        assert [a["i"] for a in r.actions] == list(range(1, len(r.actions) + 1))
        assert actions(r) == reference[r.game_id][:len(r.actions)]  # what it played, as far as it got
        assert r.end["reason"] == ("stopped" if r.game_id in doc["unfinished"] else r.end["reason"])
    kept = {g: (rec / f"{g}.jsonl").read_bytes() for g in finished}

    r = resume(out)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "score.json").read_text())
    assert doc["partial"] is False and doc["run_status"] == "complete" and "missing" not in doc
    assert {g: (rec / f"{g}.jsonl").read_bytes() for g in finished} == kept  # finished games untouched
    assert {x.game_id: actions(x) for x in read_records(out)} == reference  # as if never interrupted
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "complete" and info["resumes"][0]["games"] == sorted(set(reference) - finished)


SLOW_POLICY = """
import time
from duck.policies import Action, UserPolicy

class Slow(UserPolicy):
    def choose_action(self, obs):
        time.sleep(0.2 if self.step_count < 2 else 30)
        return Action(1) if 1 in obs.available_actions else Action.click(1, 1)
"""


def test_a_second_ctrl_c_kills_at_once(games, tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_POLICY)
    out = tmp_path / "run"
    child = spawn(games, out, f"{tmp_path / 'slow.py'}:Slow")
    wait_for(child, lambda: sum(lines(p, '"type":"action"') for p in (out / "records").glob("*.jsonl")) >= 4)
    child.sendintr()  # the first: each game ends at its next action, which is 30 s away
    wait_for(child, lambda: "stopping" in (child.before or ""), timeout=30)
    t0 = time.monotonic()
    child.sendintr()
    text = finish(child, timeout=30)
    assert child.exitstatus == 130 and time.monotonic() - t0 < 20  # at once, not the policy's 30 s
    assert "killed at once" in text and "Traceback" not in text
    assert not strays(out)
    for r in read_records(out):  # cut, not torn: every line written is there
        assert r.end is None and not r.problems and len(r.actions) >= 2
    # killed, not finished: no score.json, and run.json still says the run never ended
    # (`--resume` replays the cut games: the first test shows it on cut records)
    assert not (out / "score.json").exists()
    assert json.loads((out / "run.json").read_text())["status"] == "running"


def test_sigterm_stops_like_ctrl_c(games, reference, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([DUCK, "play", "--games", str(games), "--max-actions", ACTIONS, "--workers", "2",
                             "--policy", POLICY, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=PACED)
    t0 = time.monotonic()
    while lines(out / "records" / "zc01-00000001.jsonl", '"type":"action"') < 40:
        assert time.monotonic() - t0 < 240 and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    ending, last = stderr.strip().splitlines()[-2:]  # the ending, then (always last) the run's score
    assert "interrupted (SIGTERM)" in ending and "Traceback" not in stderr
    assert last.startswith("duck play: score ") and "the run's score" in last and "partial" in last
    assert json.loads(stdout)["partial"] is True  # the summary on stdout says so too
    r = resume(out)
    assert r.returncode == 0, r.stderr
    assert {x.game_id: actions(x) for x in read_records(out)} == reference


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KB tmpfs (root only): the first games fit, the long ones fill it."""
    with small_tmpfs(tmp_path / "disk", "400k") as disk:
        yield disk


def test_a_full_disk_stops_the_run_cleanly_and_resume_finishes_it(games, reference, small_disk):
    out = small_disk / "run"
    r = subprocess.run([DUCK, "play", "--games", str(games), "--max-actions", ACTIONS, "--workers", "2",
                        "--policy", POLICY, "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr
    ending, last = r.stderr.strip().splitlines()[-2:]
    assert "the disk is full" in ending and "--resume" in ending and "Traceback" not in r.stderr
    assert last.startswith("duck play: score ") and "partial" in last
    cut = []
    for p in sorted((out / "records").glob("*.jsonl")):
        rec = read_record(p)  # every complete line is kept; at most the last one is torn
        assert len(rec.problems) <= 1 and all("torn" in x for x in rec.problems)
        assert actions(rec) == reference[rec.game_id][:len(rec.actions)]
        if rec.end is None or rec.end["reason"] != reference and rec.end["reason"] in ("stopped", "disk_full"):
            cut.append(rec.game_id)
    assert cut  # the game that hit the full disk
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    r = resume(out)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "score.json").read_text())
    assert doc["partial"] is False and doc["run_status"] == "complete"
    assert {x.game_id: actions(x) for x in read_records(out)} == reference


def test_a_killed_run_leaves_no_worker_behind_and_resumes(games, reference, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([DUCK, "play", "--games", str(games), "--max-actions", ACTIONS, "--workers", "2",
                             "--policy", POLICY, "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=PACED)
    t0 = time.monotonic()
    while lines(out / "records" / "zc01-00000001.jsonl", '"type":"action"') < 40:
        assert time.monotonic() - t0 < 240 and proc.poll() is None
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no handler runs; the workers die with it (PR_SET_PDEATHSIG)
    proc.wait(timeout=30)
    t0 = time.monotonic()
    while strays(out) and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    assert not strays(out)
    r = resume(out)
    assert r.returncode == 0, r.stderr
    assert {x.game_id: actions(x) for x in read_records(out)} == reference
