"""The rehearsal of a competition rerun: the real notebook, a local gateway in competition
mode, a stand-in vLLM serving the scripted stub model (duck/rehearse.py).

One short rehearsal runs in CI through the command line (`duck rehearse`, exit status 0
only when every check holds), and the crash loop (~50 s: the server restarted on the ladder,
the games parked meanwhile). The fault variants take 30-50 s each; they run when
DUCK_REHEARSAL_FAULTS=1 (`DUCK_REHEARSAL_FAULTS=1 pytest tests/test_rehearse.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BUNDLED, ROOT
from duck.play.conversation import read_conversation
from devkit.rehearse.faults import FAULTS
from devkit.rehearse.checks import Report, check_run
from devkit.rehearse.run import rehearse

faults = pytest.mark.skipif(not os.environ.get("DUCK_REHEARSAL_FAULTS"),
                            reason="fault variants are opt-in: DUCK_REHEARSAL_FAULTS=1")


@pytest.mark.slow
def test_rehearsal_of_a_rerun_passes_from_the_command_line(tmp_path):
    out = tmp_path / "reh"  # given relative to where duck runs (it failed 3 checks so: issue 39)
    p = subprocess.run([sys.executable, "-m", "duck.cli", "rehearse", "--games", str(BUNDLED),
                        "--budget-seconds", "45", "--max-actions", "150", "--out", "reh"],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    doc = json.loads((out / "rerun-none" / "rehearsal.json").read_text())
    assert doc["ok"] and doc["checks"]["every_game_played"]["ok"] and doc["checks"]["scorecard_closed"]["ok"]
    assert doc["checks"]["inside_budget"]["detail"]["notebook_s"] <= 45
    assert set(doc["facts"]["gateway_scorecard"]["environments"]) == {"zb01-00000001", "zc01-00000001",
                                                                      "zs01-00000001"}
    assert "rehearsal rerun/none: PASS" in p.stdout
    # The model's conversations are among the notebook's outputs, one per game, finished.
    assert doc["checks"]["outputs_in_place"]["detail"]["conversations"] == 3
    convs = [read_conversation(p) for p in next(out.rglob("duck/conversations")).glob("*.jsonl*")]
    assert len(convs) == 3 and all(c.end and c.requests and c.path.suffix == ".gz" for c in convs)


def test_without_the_test_tools_rehearse_says_how_to_get_them(tmp_path):
    """After `make demo` (no test extras) nbclient is missing: one line, before anything runs."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "nbclient.py").write_text("raise ImportError(\"No module named 'nbclient'\", name='nbclient')\n")
    env = dict(os.environ, PYTHONPATH=str(shadow))
    p = subprocess.run([sys.executable, "-m", "duck.cli", "rehearse", "--games", str(BUNDLED), "--out",
                        str(tmp_path / "reh")], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert p.returncode == 2 and p.stdout == "" and not (tmp_path / "reh").exists()
    assert p.stderr.strip().splitlines() == [
        "duck rehearse: error: duck rehearse runs the notebook with nbclient and ipykernel, which come with the "
        "test tools (nbclient is not installed): bash scripts/setup.sh --test"]


@pytest.mark.slow
@faults
@pytest.mark.parametrize("fault", [f for f in FAULTS if f not in ("none", "crash-loop")])  # (crash-loop: below, in CI)
def test_rehearsal_fault_variants(fault, tmp_path):
    rep = rehearse(BUNDLED, 60, fault=fault, out=tmp_path / fault, max_actions=200)
    assert rep.ok, json.dumps({k: v for k, v in rep.checks.items() if not v["ok"]}, indent=1, default=str)


@pytest.mark.slow
def test_a_crash_loop_with_mtp_ends_on_the_mtp_off_rung_with_the_games_on_the_model(tmp_path):
    """Issue 35: the stand-in dies ~6 s after every boot served with MTP. The notebook
    restarts it one rung up (MTP off), where it holds; every game waited for it (no explorer
    action) and played on with the model. Every boot is in summary.json with how it ended."""
    rep = rehearse(BUNDLED, 60, fault="crash-loop", out=tmp_path / "loop", max_actions=200)
    assert rep.ok, json.dumps({k: v for k, v in rep.checks.items() if not v["ok"]}, indent=1, default=str)
    boots = rep.facts["summary"]["model"]["boots"]
    assert [(b["rung"], b["end"]) for b in boots] == [(0, "crashed"), (1, "stopped at the run's end")]
    assert boots[0]["settings"]["mtp_tokens"] == 3 and boots[1]["settings"]["mtp_tokens"] == 0
    assert "stand-in vllm: dying, as told" in boots[0]["cause"]


@pytest.mark.slow
@faults
def test_rehearsal_of_an_interactive_run(tmp_path):
    rep = rehearse(BUNDLED, 60, mode="interactive", out=tmp_path / "i", max_actions=200)
    assert rep.ok, json.dumps({k: v for k, v in rep.checks.items() if not v["ok"]}, indent=1, default=str)


def test_the_checks_fail_when_a_game_was_not_played_or_the_card_left_open(tmp_path):
    """The checks bite: a summary that skipped a game and never closed the scorecard."""
    working = tmp_path / "working"
    (working / "duck" / "records").mkdir(parents=True)
    (working / "duck" / "summary.json").write_text(json.dumps({
        "mode": "interactive", "games": ["a", "b"], "scorecard": {"card_id": "c"}, "steps": [],
        "started_at": 100.0, "ended_at": 130.0, "model": {}}))
    (working / "duck" / "run.log").write_text("")
    rep = Report("interactive", "none", 60)
    check_run(rep, {"working": working}, {"error": None, "seconds": 31.0}, ["a", "b"], None,
              "http://127.0.0.1:9")
    assert not rep.ok
    failed = {k for k, v in rep.checks.items() if not v["ok"]}
    assert {"every_game_played", "scorecard_closed", "outputs_in_place", "model_was_ready"} <= failed
    assert rep.checks["inside_budget"]["ok"]
