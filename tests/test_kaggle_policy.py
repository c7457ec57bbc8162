"""Your own policy in the Kaggle notebook: `kaggle-dataset/build.py --policy FILE.py:Class`
packs it (and a folder of helpers) into the wheel dataset with each file's sha256; the notebook
verifies them and plays it in every game, inside the fallback and the runner's time limits;
a file changed since it was packed is one line in summary.json and the default plays;
`duck rehearse --policy` runs the README's example through the real notebook."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED, ROOT
from duck.kaggle.inputs import COMPETITION, DATASET_MARKER, notebook_policy, pack_policy, packed_policy
from duck.kaggle.run import KaggleRun
from duck.play.record import read_records

EXAMPLE = ROOT / "tests" / "fixtures" / "my_policy.py"


def test_the_example_file_is_the_readmes():
    section = (ROOT / "README.md").read_text().split("## Your own policy", 1)[1]
    assert re.search(r"```python\n(.*?)```", section, re.S).group(1) == EXAMPLE.read_text()


def _dataset(tmp_path: Path, spec: str | None, helpers: Path | None = None) -> Path:
    ds = tmp_path / "input" / "datasets" / "me" / "duck-arc3-wheels"
    ds.mkdir(parents=True)
    doc = {"name": "duck-arc3-wheels"}
    if spec:
        doc["policy"] = pack_policy(spec, ds, helpers)
    (ds / DATASET_MARKER).write_text(json.dumps(doc))
    return ds


def _run(tmp_path: Path, monkeypatch, **extra: str) -> KaggleRun:
    comp = tmp_path / "input" / "competitions" / COMPETITION
    shutil.copytree(BUNDLED, comp / "environment_files")
    for k in list(os.environ):
        if k.startswith("DUCK_") or k == "KAGGLE_IS_COMPETITION_RERUN":
            monkeypatch.delenv(k)
    env = {"DUCK_KAGGLE__INPUT_DIR": str(tmp_path / "input"), "DUCK_KAGGLE__WORKING_DIR": str(tmp_path / "working"),
           "DUCK_KAGGLE__INTERACTIVE_BUDGET_S": "90", "DUCK_KAGGLE__MARGIN_S": "10",
           "DUCK_PLAY__MAX_ACTIONS": "30", "DUCK_SCHEDULER__SLOTS": "3", **extra}
    run = KaggleRun(env=env)
    run.start_model() and run.wait_model()
    run.open_games()
    try:
        run.play()
    finally:
        run.finish()
    return run


def _policies(tmp_path: Path) -> dict[str, str]:
    return {r.game_id[:4]: r.header["policy"] for r in read_records(tmp_path / "working" / "duck")}


def test_the_notebook_plays_the_packed_policy_with_its_helpers(tmp_path, monkeypatch):
    helpers = tmp_path / "src" / "mylib"
    helpers.mkdir(parents=True)
    (helpers / "__init__.py").write_text("FIRST = 1\n")
    (tmp_path / "src" / "mine.py").write_text(
        "from mylib import FIRST\nfrom duck.policies import Action, UserPolicy\n\n"
        "class Mine(UserPolicy):\n    def choose_action(self, obs):\n"
        "        if self.step_count >= 5:\n            return None\n"
        "        return Action(FIRST) if FIRST in obs.available_actions else Action.click(FIRST, FIRST)\n")
    ds = _dataset(tmp_path, f"{tmp_path / 'src' / 'mine.py'}:Mine", helpers)
    assert sorted(json.loads((ds / DATASET_MARKER).read_text())["policy"]["files"]) == [
        "policy/mine.py", "policy/mylib/__init__.py"]
    run = _run(tmp_path, monkeypatch)
    summary = json.loads((run.out / "summary.json").read_text())
    assert summary["errors"] == [] and summary["model"]["status"] == "off (play.policy " + run.policy + " needs no model)"
    assert set(_policies(tmp_path).values()) == {"mine:Mine"}
    assert all(r["actions"] > 0 for r in summary["results"].values())


def test_a_policy_file_changed_since_it_was_packed_is_one_line_and_the_default_plays(tmp_path, monkeypatch):
    ds = _dataset(tmp_path, f"{EXAMPLE}:Patrol")
    packed = ds / "policy" / "my_policy.py"
    packed.write_text(packed.read_text().replace("% 3 == 2", "% 4 == 2"))
    spec, problem = packed_policy(ds)
    assert spec is None and "policy/my_policy.py changed since it was packed" in problem
    run = _run(tmp_path, monkeypatch)
    summary = json.loads((run.out / "summary.json").read_text())
    assert len(summary["errors"]) == 1 and "changed since it was packed" in summary["errors"][0]
    assert "\n" not in summary["errors"][0] and run.policy is None
    assert set(_policies(tmp_path).values()) == {"explorer"}  # no weights attached here: the explorer plays
    assert all(r["actions"] > 0 for r in summary["results"].values())


def test_play_policy_from_the_environment_wins_and_a_failing_policy_hands_over_to_the_explorer(tmp_path, monkeypatch):
    (tmp_path / "bad.py").write_text(
        "from duck.policies import Action, UserPolicy\n\nclass Bad(UserPolicy):\n"
        "    def choose_action(self, obs):\n        if self.step_count == 3:\n"
        "            raise RuntimeError('my bug')\n"
        "        a = obs.available_actions[0]\n        return Action.click(1, 1) if a == 6 else Action(a)\n")
    _dataset(tmp_path, f"{EXAMPLE}:Patrol")
    run = _run(tmp_path, monkeypatch, DUCK_PLAY__POLICY=f"{tmp_path / 'bad.py'}:Bad")
    assert set(_policies(tmp_path).values()) == {"bad:Bad"}
    for rec in read_records(tmp_path / "working" / "duck"):
        fallback = [e for e in rec.events if e["kind"] == "fallback"]
        assert fallback and "my bug" in fallback[0]["message"]
        assert len(rec.actions) > 3  # the explorer went on from where the game stood
    assert run.summary.errors == []


def test_notebook_policy_refuses_a_broken_file_in_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("def oops(:\n")
    spec, problem = notebook_policy(f"{tmp_path / 'broken.py'}:X", None)
    assert spec is None and "syntax error" in problem and "\n" not in problem
    assert notebook_policy("explorer", None) == ("explorer", None)
    assert notebook_policy(None, None) == (None, None)
    with pytest.raises(ValueError, match="FILE.py:ClassName"):
        pack_policy(str(EXAMPLE), tmp_path)


def test_build_packs_the_policy_into_an_existing_build_and_checks_it(tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    (out / DATASET_MARKER).write_text(json.dumps({"name": "duck-arc3-wheels"}))
    build = [sys.executable, str(ROOT / "kaggle-dataset" / "build.py"), "--out", str(out)]
    r = subprocess.run(build + ["--policy", f"{EXAMPLE}:Patrol", "--policy-only"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    entry = json.loads((out / DATASET_MARKER).read_text())["policy"]
    assert entry["spec"] == "policy/my_policy.py:Patrol" and list(entry["files"]) == ["policy/my_policy.py"]
    assert packed_policy(out) == (f"{out / 'policy' / 'my_policy.py'}:Patrol", None)
    r = subprocess.run(build + ["--policy", "nope.py:X", "--policy-only"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no such file nope.py" in r.stderr


@pytest.mark.slow
def test_the_readme_example_passes_duck_rehearse(tmp_path):
    out = tmp_path / "reh"
    p = subprocess.run([sys.executable, "-m", "duck.cli", "rehearse", "--policy", "tests/fixtures/my_policy.py:Patrol",
                        "--budget-seconds", "45", "--max-actions", "150", "--out", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    doc = json.loads((out / "rerun-none" / "rehearsal.json").read_text())
    assert doc["checks"]["user_policy_played"]["ok"] and doc["checks"]["no_model_started"]["ok"]
    assert "rehearsal rerun/none: PASS" in p.stdout
