"""A run folder explains itself (duck.run.info, duck.lab.report): run.json says what produced
it, `duck score` and `duck report` say what is missing, `duck report A B` compares two runs game
by game; and `--policy llm` is honest about its model: an error before anything plays when no
server answers, the fallback only when asked for, and said once when it takes over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED
from duck.config import load_config
from duck.play.record import read_records
from duck.run.info import config_of

ROOT = Path(__file__).resolve().parent.parent
DUCK = str(Path(sys.executable).parent / "duck")


def duck(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([DUCK, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    out = {"explorer": base / "explorer", "random": base / "random"}
    for policy, run in out.items():
        r = duck("play", "--games", str(BUNDLED), "--policy", policy, "--max-actions", "40", "--out", str(run),
                 "--set", "play.seed=2")
        assert r.returncode == 0, r.stderr
    return out


def test_run_json_holds_what_produced_the_run(runs):
    info = json.loads((runs["explorer"] / "run.json").read_text())
    assert info["command"][:2] == ["duck", "play"] and "--max-actions" in info["command"]
    assert info["status"] == "complete" and info["started"] <= info["ended"]
    assert info["games"] == sorted(rec.game_id for rec in read_records(runs["explorer"]))
    cfg = load_config(overrides=["play.policy=explorer", "play.max_actions=40", "play.seed=2"])
    assert info["config"] == cfg.model_dump(mode="json")
    assert set(info["derived"]) == set(cfg.derived) and info["plan"] == cfg.plan.as_dict()
    assert info["profile"] == cfg.model.profile == info["plan"]["profile"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert info["git"]["commit"] == head.stdout.strip() and isinstance(info["git"]["dirty"], bool)
    assert {"python", "arc-agi", "numpy"} <= set(info["versions"])
    assert info["machine"]["cpus"] >= 1 and info["machine"]["host"]
    assert config_of(info).model_dump() == cfg.model_dump() and config_of(info).derived == cfg.derived


def test_the_report_header_comes_from_run_json(runs):
    r = duck("report", str(runs["explorer"]), "--no-frames")
    assert r.returncode == 0, r.stderr
    md = (runs["explorer"] / "report.md").read_text()
    header = md.split("## Run", 1)[1].split("## Games", 1)[0]
    assert "duck play --games" in header and "complete" in header and "explorer · seed 2 · 40 actions" in header
    assert "arc-agi 0.9.9" in header and "serving profile" not in header  # no model played: no profile
    assert "<section id=run>" in (runs["explorer"] / "report.html").read_text()


def test_report_a_b_compares_two_runs_game_by_game(runs, tmp_path):
    r = duck("report", str(runs["explorer"]), str(runs["random"]), "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "compare.md").read_text()
    a = json.loads((runs["explorer"] / "score.json").read_text())["games"]
    b = json.loads((runs["random"] / "score.json").read_text())["games"]
    for g in a:  # a row per game with both scores and B − A
        assert f"| {g} | {a[g]['score']:.2f} | {b[g]['score']:.2f} | {b[g]['score'] - a[g]['score']:+.2f} |" in md
    assert '| play.policy | "explorer" | "random" |' in md  # what differs, from run.json
    assert "html" in json.loads(r.stdout) and (tmp_path / "compare.html").read_text().count("<tr>") > 6
    a, b = runs["explorer"], runs["random"]
    assert r.stderr == (f"duck report: wrote the comparison of {a} (A) and {b} (B) into {tmp_path}/: "
                        "compare.html, compare.md\n")


def test_score_and_report_say_which_games_are_missing(runs, tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(runs["explorer"], run)
    gone = sorted((run / "records").glob("*.jsonl"))[0]
    gone.unlink()
    r = duck("score", str(run))
    assert r.returncode == 0
    warning = [line for line in r.stderr.splitlines() if "partial run" in line]
    assert len(warning) == 1 and gone.stem in warning[0] and "--resume" in warning[0]
    doc = json.loads((run / "score.json").read_text())
    assert doc["partial"] is True and doc["missing"] == [gone.stem] and doc["games_expected"] == 3
    assert doc["score_missing_as_0"] == pytest.approx(sum(v["score"] for v in doc["games"].values()) / 3)
    assert duck("report", str(run), "--no-frames").returncode == 0
    assert f"missing games | 1: {gone.stem}" in (run / "report.md").read_text()
    # and --resume plays just that game, with the run's config
    r = duck("play", "--resume", "--out", str(run))
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "score.json").read_text())["partial"] is False
    assert (run / "records" / gone.name).read_text().count('"type":"action"') == \
        (runs["explorer"] / "records" / gone.name).read_text().count('"type":"action"')


def test_a_folder_without_run_json_still_scores_and_says_so(runs, tmp_path):
    import shutil
    run = tmp_path / "old"
    shutil.copytree(runs["random"], run)
    (run / "run.json").unlink()
    r = duck("score", str(run))
    assert r.returncode == 0 and "no run.json" in r.stderr
    assert json.loads((run / "score.json").read_text())["partial"] is False


# --- the model ---------------------------------------------------------------------------

def _stub(tmp_path: Path, replies: list[dict]) -> tuple[subprocess.Popen, str]:
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    server = subprocess.Popen([DUCK, "stub-server", "--port", "0", "--replies", str(tmp_path / "replies.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return server, json.loads(server.stdout.readline())["url"]


def test_llm_without_a_server_plays_nothing_unless_the_fallback_is_asked_for(tmp_path):
    out = tmp_path / "run"
    r = duck("play", "--games", str(BUNDLED), "--model-url", "http://127.0.0.1:9", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "nothing played" in r.stderr
    assert not list((out / "records").glob("*.jsonl")) and not (out / "run.json").exists()  # nothing touched
    r = duck("play", "--games", str(BUNDLED), "--model-url", "http://127.0.0.1:9", "--out", str(out),
             "--max-actions", "10", "--set", "play.model_fallback=true")
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "no model server" in line]
    assert len(said) == 2  # the run's notice once, and the first game's (then only each game's line)
    game_lines = [line for line in r.stderr.splitlines() if line.startswith("duck play: [")]
    assert len(game_lines) == 3 and all("explorer: model unreachable" in line for line in game_lines)
    summary = json.loads(r.stdout)
    assert summary["fallback"] == sorted(summary["games"])
    for rec in read_records(out):
        assert rec.header["policy"] == "llm" and len(rec.actions) == 10
        assert [e["message"] for e in rec.events if e["kind"] == "fallback"] == ["no model server: the explorer plays"]


def test_the_fallback_taking_over_mid_run_is_said_once(tmp_path):
    """Two scripted model replies (two actions), then the stub answers 410 to everything and
    no game waits for it (`agent.outage_wait_s=0`: tests/test_outage.py has the wait): the
    first game hands over to the explorer mid-game, the others at their first request; the run
    says so once, every game's line shows it, and the summary names them."""
    reply = {"content": "Up.", "code": "action('UP')"}
    server, url = _stub(tmp_path, [reply, reply])
    try:
        out = tmp_path / "run"
        r = duck("play", "--games", str(BUNDLED), "--only", "zb01", "zs01", "--model-url", url, "--out", str(out),
                 "--max-actions", "30", "--set", "model.retries=0", "model.backoff_s=0.01",
                 "agent.failures_before_fallback=1", "agent.outage_wait_s=0")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert sum("(said once" in line for line in lines) == 1
    assert [("explorer: model unreachable" in line) for line in lines if line.startswith("duck play: [")] == [True] * 2
    assert lines[-2].startswith("duck play: the model became unreachable: the explorer finished 2 game(s)")
    assert lines[-1].startswith("duck play: score ")  # the run's score, always last
    first = read_records(out)[0]
    model_actions = [a for a in first.actions if a.get("info")]
    assert model_actions and len(first.actions) == 30  # the model's actions, then the explorer's to the budget
    assert any(e["kind"] == "fallback" for e in first.events)
    assert "Traceback" not in r.stderr and "WARNING" not in r.stderr  # no per-retry warnings without -v


def test_a_run_json_from_before_issue_40_resumes_in_todays_fields():
    """The fields issue 40 retired are dropped where the old run held what today's code plays
    as; explorer.options become the typed explorer fields, the two guard fields `agent.guards`;
    a run that set a retired field to something else cannot be resumed by this version (one line)."""
    old = json.loads((Path(__file__).parent / "fixtures" / "run_json_8ea88b8.json").read_text())
    today = load_config(env={})
    resumed = config_of(old)
    assert resumed.model.serve.cudagraph_mode == "PIECEWISE"  # what that run was served with (the default then)
    resumed.model.serve.cudagraph_mode = ""
    assert resumed.kernel.disk_inodes == 16384  # its file cap then (issue 48 lowered the default to 1,024)
    resumed.kernel.disk_inodes = today.kernel.disk_inodes
    assert resumed.model_dump() == today.model_dump() and set(resumed.derived) == set(today.derived)
    nav_off = json.loads(json.dumps(old))
    nav_off["config"]["explorer"]["options"] = {"nav": False}
    nav_off["config"]["agent"].update(guard_stop_on_no_effect=False, guard_block_from_level=0)
    cfg = config_of(nav_off)
    assert cfg.explorer.nav is False and cfg.agent.guards is False
    at_4x = json.loads(json.dumps(old))
    at_4x["config"]["agent"]["image_scale"] = 4
    with pytest.raises(ValueError, match=r"sets agent.image_scale, which this version no longer has \(it plays as 10\)"):
        config_of(at_4x)
