"""A user's own policy in one file (`duck play --policy FILE.py:Class`): the README's example
runs as printed, in one process and in two workers, and a policy that breaks is that game's
error, never the run's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import BUNDLED
from duck.play.record import read_records

ROOT = Path(__file__).resolve().parent.parent
DUCK = str(Path(sys.executable).parent / "duck")


def readme_example() -> str:
    """The first Python block of the README's "Your own policy" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Your own policy", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def play(policy: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DUCK, "play", "--games", str(BUNDLED), "--policy", policy, "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300)


def test_the_readme_example_runs(tmp_path):
    code = readme_example()
    assert 15 <= len(code.strip().splitlines()) <= 25  # the "20-line example" the README promises
    (tmp_path / "my_policy.py").write_text(code)
    for workers in ("1", "2"):
        out = tmp_path / f"run{workers}"
        r = play(str(tmp_path / "my_policy.py") + ":Patrol", out, "--max-actions", "60", "--workers", workers)
        assert r.returncode == 0, r.stderr
        recs = read_records(out)
        assert len(recs) == 3 and all(rec.header["policy"] == "my_policy:Patrol" for rec in recs)
        assert all(rec.end["reason"] in ("max_actions", "won") and not rec.problems for rec in recs)
        # it clicked in the click game and pressed keys in the key games
        kinds = {rec.game_id[:4]: {a["action"][0] for a in rec.actions} for rec in recs}
        assert kinds["zc01"] == {6} and kinds["zs01"] - {0} <= {1, 2, 3, 4, 7} and len(kinds["zs01"]) > 1
        doc = json.loads((out / "score.json").read_text())
        assert doc["partial"] is False and set(doc["games"]) == {rec.game_id for rec in recs}
    # the same policy, seed and games: the same actions, whatever the number of workers
    one, two = ({r.game_id: [a["action"] for a in r.actions] for r in read_records(tmp_path / f"run{w}")}
                for w in ("1", "2"))
    assert one == two


def test_a_relative_path_resumes_from_anywhere(tmp_path):
    (tmp_path / "p.py").write_text(readme_example())
    r = subprocess.run([DUCK, "play", "--games", str(BUNDLED), "--policy", "p.py:Patrol", "--out", "run",
                        "--max-actions", "5"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["config"]["play"]["policy"] == f"{tmp_path / 'p.py'}:Patrol"  # made absolute for workers and --resume
    r = subprocess.run([DUCK, "report", str(tmp_path / "run"), str(tmp_path / "run"), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)  # (ROOT: not where the file is)
    md = (tmp_path / "compare.md").read_text()
    policy = next(line for line in md.splitlines() if line.startswith("| policy |"))
    assert r.returncode == 0 and policy.startswith("| policy | p.py:Patrol · seed 0"), policy


def test_a_policy_that_breaks_is_its_games_error(tmp_path):
    (tmp_path / "bad.py").write_text(
        "from duck.policies import Action, UserPolicy\n\n"
        "class Bad(UserPolicy):\n"
        "    def choose_action(self, obs):\n"
        "        if self.game_id.startswith('zc01'):\n"
        "            raise RuntimeError('my bug')\n"
        "        if self.game_id.startswith('zb01') and self.step_count == 2:\n"
        "            return 'UP'\n"
        "        return None if self.step_count >= 4 else Action(1)\n")
    out = tmp_path / "run"
    r = play(str(tmp_path / "bad.py") + ":Bad", out, "--max-actions", "20")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "score.json").read_text())
    errors = {g[:4]: v.get("error", "") for g, v in doc["games"].items()}
    assert "RuntimeError: my bug" in errors["zc01"]
    assert "not an Action" in errors["zb01"] and doc["games"]["zb01-00000001"]["actions"] == 2
    assert errors["zs01"] == "" and doc["games"]["zs01-00000001"]["actions"] == 4  # None: the policy is done
    # the first traceback (zb01's) is on stderr, the others one `-v` away
    assert r.stderr.count("Traceback (most recent call last)") == 1 and "not an Action" in r.stderr
    assert "and 1 more: duck -v play shows them all" in r.stderr
    v = subprocess.run([DUCK, "-v", "play", "--games", str(BUNDLED), "--policy", str(tmp_path / "bad.py") + ":Bad",
                        "--out", str(tmp_path / "v"), "--max-actions", "20"], capture_output=True, text=True, timeout=300)
    assert v.returncode == 0 and v.stderr.count("Traceback (most recent call last)") == 2
    assert "raise RuntimeError('my bug')" in v.stderr
