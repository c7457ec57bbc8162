"""How `duck play` ends and what it keeps of your own code (issue 39): the table and the score
last on a terminal (a real pty), the JSON in a pipe or with --json, "next" commands as the user
runs duck, a new run folder per run by default, exit 1 when every game errored; a user policy
file's sha256 and copy in the run folder, the run dirty when the file is not committed as it
is, `--resume` refusing a changed file; and `make lint` leaving untracked files alone."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED
from duck.run.provenance import git_standing

ROOT = Path(__file__).resolve().parent.parent
DUCK = str(Path(sys.executable).parent / "duck")

POLICY = """
from duck.policies import Action, UserPolicy

class Up(UserPolicy):
    def choose_action(self, obs):
        return Action(1) if 1 in obs.available_actions else Action.click(3, 3)
"""


def duck(*args: str, cwd: Path = ROOT, exe: str = DUCK) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_on_a_terminal_the_table_then_the_score_come_last(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    out = tmp_path / "run"
    term = {**os.environ, "TERM": "xterm-256color"}  # a terminal that redraws (CI's own TERM may be "dumb")
    child = pexpect.spawn(DUCK, ["play", "--games", str(BUNDLED), "--max-actions", "30", "--policy", "random",
                                 "--out", str(out)], dimensions=(40, 160), timeout=300, encoding="utf-8", env=term)
    child.expect(pexpect.EOF)
    child.close()
    lines = [x.strip() for x in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before).splitlines() if x.strip()]
    assert child.exitstatus == 0 and not any(x.startswith(("{", '"score"')) for x in lines)  # no JSON here
    doc = json.loads((out / "score.json").read_text())
    levels = sum(g["levels"] for g in doc["games"].values())
    assert lines[-1] == (f"score {doc['score']:.3f}% (the run's score: mean over its 3 games recorded; "
                         f"{levels} level{'' if levels == 1 else 's'} completed) → {out}")
    assert lines[-2].startswith("next: ") and f"report {out}" in lines[-2]
    table = [i for i, x in enumerate(lines) if x.startswith(("zb01-", "zc01-", "zs01-"))]
    assert len(table) >= 3 and max(table) < len(lines) - 2  # the summary table, above the score

    child = pexpect.spawn(DUCK, ["play", "--games", str(BUNDLED), "--max-actions", "30", "--policy", "random",
                                 "--out", str(out), "--overwrite", "--json"], dimensions=(40, 160), timeout=300,
                          encoding="utf-8", env=term)
    child.expect(pexpect.EOF)
    assert '"score":' in child.before and '"next": [' in child.before


def test_a_dumb_terminal_gets_a_line_per_game_not_a_table_that_never_draws(tmp_path):
    # rich does not redraw when TERM is "dumb" (an editor's shell, some CI runners): the live table
    # showed nothing at all until the end; such a terminal gets the log lines of a pipe
    pexpect = pytest.importorskip("pexpect")
    out = tmp_path / "run"
    child = pexpect.spawn(DUCK, ["play", "--games", str(BUNDLED), "--max-actions", "30", "--policy", "random",
                                 "--out", str(out)], dimensions=(40, 160), timeout=300, encoding="utf-8",
                          env={**os.environ, "TERM": "dumb"})
    child.expect(pexpect.EOF)
    child.close()
    lines = [x.strip() for x in child.before.splitlines()]
    assert child.exitstatus == 0
    ends = [x for x in lines if re.match(r"duck play: \[\d/3\] z[bcs]01-", x)]
    assert len(ends) == 3 and lines[0].startswith("duck play: ")


def test_next_commands_name_duck_as_the_readme_runs_it(tmp_path):
    r = duck("play", "--games", str(BUNDLED), "--max-actions", "5", "--policy", "random", "--out",
             str(tmp_path / "run"), exe=".venv/bin/duck")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["next"][0] == f".venv/bin/duck report {tmp_path / 'run'}"


def test_each_run_gets_its_own_folder_by_default(tmp_path):
    for _ in range(2):
        r = duck("play", "--games", str(BUNDLED), "--max-actions", "5", "--policy", "random", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"\d{8}-\d{6}-random(-\d+)?", name) for name in runs)
    assert all((tmp_path / "runs" / name / "score.json").exists() for name in runs)


def test_a_policy_that_fails_every_game_is_exit_1(tmp_path):
    (tmp_path / "boom.py").write_text("from duck.policies import UserPolicy\n\nclass Boom(UserPolicy):\n"
                                      "    def choose_action(self, obs):\n        raise KeyError('no such thing')\n")
    r = duck("play", "--games", str(BUNDLED), "--policy", f"{tmp_path / 'boom.py'}:Boom", "--out", str(tmp_path / "run"))
    assert r.returncode == 1
    assert "duck play: error: every game ended in an error (KeyError: 'no such thing')" in r.stderr
    assert r.stderr.count("Traceback (most recent call last)") == 1 and "and 2 more" in r.stderr


def test_a_policy_that_cannot_be_made_is_exit_1_with_its_traceback(tmp_path):
    """It fails before any record is written (the game has no record at all), on every game."""
    (tmp_path / "bad.py").write_text("from duck.policies import UserPolicy\n\nclass Bad(UserPolicy):\n"
                                     "    def __init__(self, seed=0):\n        raise ValueError('bad option')\n")
    for workers in ("1", "2"):
        r = duck("play", "--games", str(BUNDLED), "--policy", f"{tmp_path / 'bad.py'}:Bad", "--workers", workers,
                 "--out", str(tmp_path / f"run{workers}"))
        assert r.returncode == 1, r.stderr
        assert "every game ended in an error (ValueError: bad option)" in r.stderr.strip().splitlines()[-1]
        assert "raise ValueError('bad option')" in r.stderr


def test_the_policy_file_is_kept_hashed_and_makes_the_run_dirty_and_resume_refuses_a_change(tmp_path):
    policy = tmp_path / "up.py"
    policy.write_text(POLICY)
    out = tmp_path / "run"
    r = duck("play", "--games", str(BUNDLED), "--policy", f"{policy}:Up", "--max-actions", "10", "--out", str(out))
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "run.json").read_text())
    [f] = info["policy_files"]
    assert f["path"] == str(policy) and f["sha256"] == hashlib.sha256(policy.read_bytes()).hexdigest()
    assert f["git"] == "outside" and (out / f["copy"]).read_bytes() == policy.read_bytes()
    if info["git"] is not None:  # a file the commit does not hold: the run cannot be redone from the commit
        assert info["git"]["dirty"] is True and "policy file up.py is outside" in info["git"]["dirty_because"]

    (out / "records" / "zs01-00000001.jsonl").unlink()  # one game to play again
    policy.write_text(POLICY.replace("Action(1)", "Action(2)"))
    r = duck("play", "--resume", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "the policy file" in r.stderr and "changed since the run started" in r.stderr
    assert "--policy-changed-ok" in r.stderr and str(out / "policy" / "up.py") in r.stderr
    assert not (out / "records" / "zs01-00000001.jsonl").exists()  # nothing played
    r = duck("play", "--resume", "--out", str(out), "--policy-changed-ok")
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "run.json").read_text())
    changed = info["resumes"][-1]["policy_files_changed"]
    assert changed == [{"path": str(policy), "sha256": hashlib.sha256(policy.read_bytes()).hexdigest(),
                        "was": f["sha256"]}]
    assert info["resumes"][-1]["games"] == ["zs01-00000001"]


def test_where_a_file_stands_in_a_checkout(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "kept.py").write_text("x = 1\n")
    (repo / "edited.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "kept.py", "edited.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (repo / "edited.py").write_text("x = 2\n")
    (repo / "new.py").write_text("x = 3\n")
    assert git_standing(repo / "kept.py", repo) == "tracked"
    assert git_standing(repo / "edited.py", repo) == "modified"
    assert git_standing(repo / "new.py", repo) == "untracked"
    assert git_standing(tmp_path / "elsewhere.py", repo) == "outside"


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_make_lint_leaves_your_untracked_files_alone(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "scripts/lint.sh"):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    (repo / "ok.py").write_text("x = 1\n")
    (repo / "mine.py").write_text("import os\n")  # unused import: a lint error, in a file git does not track
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "Makefile", "pyproject.toml", "scripts/lint.sh", "ok.py"], check=True)
    r = subprocess.run(["make", "-s", "lint"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    subprocess.run([*git, "add", "mine.py"], check=True)  # tracked now: linted
    r = subprocess.run(["make", "-s", "lint"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "mine.py" in r.stdout
