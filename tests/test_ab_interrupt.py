"""`duck ab` you can live with: the progress of `duck play` on a real terminal (pexpect: a
pseudo-terminal, so the live table is on and Ctrl-C is the terminal's SIGINT to the whole
foreground process group, the workers included), Ctrl-C that stops every game at its next
action and prints the command that resumes, and that command finishing the experiment with
the records finished before the Ctrl-C untouched."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BUNDLED
from duck.play.record import read_record
from duck.play.scoring import record_finished

pexpect = pytest.importorskip("pexpect")
ROOT = Path(__file__).resolve().parent.parent
DUCK = str(Path(sys.executable).parent / "duck")


PACED = "tests/fixtures/paced.py:Paced"  # random actions, each after $PACED_S seconds


def ab_args(out: Path, passes: int = 2, actions: int = 800, *extra: str) -> list[str]:
    return ["ab", "--a", "experiments/random.toml", "--b", "experiments/random.toml",
            "--set-a", f"play.policy={PACED}", "--set-b", f"play.policy={PACED}", "play.seed=1",
            "model.temperature=0.5", "--games", str(BUNDLED), "--passes", str(passes),
            "--max-actions", str(actions), "--workers", "2", "--out", str(out), *extra]


def ended(out: Path) -> list[Path]:
    return [p for p in out.rglob("records/*.jsonl") if '"type":"end"' in p.read_text()]


def test_progress_then_ctrl_c_stops_within_two_seconds_and_the_resume_line_finishes_it(tmp_path):
    out = tmp_path / "ab"
    # A terminal that redraws (CI's own TERM may be "dumb"); each action takes at least 5 ms, so that a
    # run lasts 4 s or more however fast the machine (800 actions of random: ~0.2 s on a fast idle
    # one): the table is drawn (4 times a second) and the next runs are under way when Ctrl-C comes.
    env = {**os.environ, "TERM": "xterm-256color", "PACED_S": "0.005"}
    child = pexpect.spawn(DUCK, ab_args(out), cwd=str(ROOT), dimensions=(40, 160), timeout=300, env=env,
                          encoding="utf-8", codec_errors="replace")
    seen = ""
    t0 = time.monotonic()
    while len(ended(out)) < 2:  # two runs finished, the next ones under way
        assert time.monotonic() - t0 < 240, "timed out waiting"
        try:
            child.expect(pexpect.TIMEOUT, timeout=0.1)
        except pexpect.EOF:
            pytest.fail(f"duck ab ended early: {child.before[-2000:]}")
        seen += child.before or ""
    # the live table: the arms, passes and games, runs done / playing / queued, each arm's score so far
    assert "A p0 zb01-00000001" in seen and "B p0 zb01-00000001" in seen
    assert "playing" in seen and "queued" in seen and "mean score" in seen and "Ctrl-C stops" in seen
    child.sendintr()
    t1 = time.monotonic()
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    text = child.before
    # (~0.5 s on an idle machine; 10 s: a busy one, still far from the 20 s the runs left would take)
    assert child.exitstatus == 130 and time.monotonic() - t1 < 10
    assert "Traceback" not in text and "stopping: every game ends at its next action" in text
    line = next(x for x in text.splitlines() if "resume with: " in x)
    assert line.startswith("duck ab: interrupted (Ctrl-C)")
    resume = line.split("resume with: ", 1)[1].strip()
    assert shlex.split(resume)[1:] == ab_args(out)  # the same command (finished runs are kept)
    finished, stopped = {}, 0
    for p in out.rglob("records/*.jsonl"):  # every record intact: ended where its game ended, or stopped
        rec = read_record(p)
        assert not rec.problems and rec.end is not None
        assert rec.end["reason"] in ("stopped", "max_actions", "won", "policy_done")
        stopped += rec.end["reason"] == "stopped"
        if record_finished(rec):
            finished[p] = p.read_bytes()
    assert len(finished) >= 2 and stopped >= 1 and not (out / "ab.json").exists()  # cut mid-game

    r = subprocess.run([str(ROOT / shlex.split(resume)[0]), *shlex.split(resume)[1:]], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)  # (no PACED_S: full speed)
    assert r.returncode == 0, r.stderr[-2000:]
    assert {p: p.read_bytes() for p in finished} == finished  # not replayed
    doc = json.loads((out / "ab.json").read_text())
    assert json.loads(r.stdout) == doc and doc["n_pairs"] == 6  # stdout is ab.json
    assert r.stderr.strip().splitlines()[-1].startswith("duck ab: no significant difference over games")


def test_a_game_stopped_by_ctrl_c_is_not_a_result_and_is_played_again(tmp_path):
    """A record that ended with reason `stopped` is neither scored nor kept: the rerun plays it
    from its start (duck.run.record_complete, duck.lab.ab.scores)."""
    from duck.lab.ab.scores import scores_from_records
    out = tmp_path / "ab"
    args = [DUCK, *ab_args(out, 1, 30, "--only", "zb01")]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    path = next(out.rglob("a/p000/records/*.jsonl"))
    lines = path.read_text().splitlines()
    end = json.loads(lines[-1]) | {"reason": "stopped"}
    path.write_text("\n".join(lines[:10] + [json.dumps(end)]) + "\n")  # as a Ctrl-C leaves it
    _, info = scores_from_records(sorted(out.rglob("records/*.jsonl")))
    assert info == {"runs": 1, "incomplete": 1, "paired_by": "pass"}
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert record_finished(read_record(path)) and json.loads(r.stdout)["n_pairs"] == 1
