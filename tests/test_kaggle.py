"""duck.kaggle.run: finding Kaggle's inputs, the gateway wait, the placeholder, the fallback
policy, and whole notebook runs in-process (interactive, and degraded paths)."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


from duck.config import load_config
from duck.game.source import GameSource
from duck.llm.health import ModelHealth
from duck.policies import FallbackPolicy
from duck.kaggle.run import KaggleRun
from duck.kaggle.inputs import (COMPETITION, DATASET_MARKER, find_competition_dir, find_dataset_dir, find_model_dir, is_rerun)
from duck.kaggle.play import wait_for_gateway
from duck.kaggle.outputs import PLACEHOLDER_COLUMNS, write_placeholder_submission
from duck.play.session import PlayStopped, play_game
from duck.play.record import read_record

from conftest import BUNDLED


def test_mode_from_the_rerun_variable():
    assert is_rerun({"KAGGLE_IS_COMPETITION_RERUN": "1"})
    assert not is_rerun({})
    assert not is_rerun({"KAGGLE_IS_COMPETITION_RERUN": ""})


def test_config_section_from_environment():
    cfg = load_config(env={"DUCK_KAGGLE__BUDGET_S": "120", "DUCK_KAGGLE__GATEWAY_URL": "http://x:1/",
                           "DUCK_KAGGLE__MARGIN_S": "30", "DUCK_SCHEDULER__ADAPTIVE__STALL_FACTOR": "4"})
    assert cfg.kaggle.budget_s == 120.0 and cfg.kaggle.gateway_url == "http://x:1/"
    assert cfg.kaggle.margin_s == 30 and cfg.kaggle.stop_grace_s == 10 and cfg.scheduler.adaptive.stall_factor == 4
    d = load_config(env={}).kaggle
    assert (d.working_dir, d.gateway_url, d.api_key) == ("/kaggle/working", "http://gateway:8001/", "test-key-123")
    assert d.budget_s == 9 * 3600 and 0 < d.margin_s < d.interactive_budget_s < d.budget_s


def _kaggle_inputs(root: Path) -> dict[str, Path]:
    comp = root / "competitions" / COMPETITION
    (comp / "environment_files").mkdir(parents=True)
    (comp / "arc_agi_3_wheels").mkdir()
    ds = root / "datasets" / "someone" / "duck-arc3-wheels"
    ds.mkdir(parents=True)
    (ds / DATASET_MARKER).write_text("{}")
    model = root / "models" / "qwen-lm" / "qwen3.6-27b-fp8" / "transformers" / "default" / "1"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model-00001-of-00002.safetensors").write_bytes(b"")
    other = root / "datasets" / "someone" / "qwen3-8-27b-fp8"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    (other / "model.safetensors").write_bytes(b"")
    return {"competition": comp, "dataset": ds, "model": model, "other": other}


def test_finding_the_inputs_as_kaggle_mounts_them(tmp_path):
    p = _kaggle_inputs(tmp_path)
    assert find_competition_dir(tmp_path) == p["competition"]
    assert find_dataset_dir(tmp_path) == p["dataset"]
    assert find_model_dir(tmp_path, "Qwen3.6-27B-FP8") == p["model"]
    assert find_model_dir(tmp_path, "Qwen/Qwen3.8-27B-FP8") == p["other"]
    assert find_model_dir(tmp_path, "Llama-70B") is None  # two candidates, neither named
    assert find_model_dir(tmp_path, "x", explicit=str(p["other"])) == p["other"]
    assert find_dataset_dir(tmp_path / "nowhere") is None
    old = tmp_path / "old"
    (old / COMPETITION / "environment_files").mkdir(parents=True)
    assert find_competition_dir(old) == old / COMPETITION


def test_placeholder_submission(tmp_path):
    import pyarrow.parquet as pq
    path = write_placeholder_submission(tmp_path / "submission.parquet")
    table = pq.read_table(path)
    assert table.column_names == list(PLACEHOLDER_COLUMNS)
    assert table.to_pylist() == [{"row_id": "1_0", "game_id": "1", "end_of_game": True, "score": 1}]


class _Games(BaseHTTPRequestHandler):
    calls = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        type(self).calls += 1
        body = json.dumps([] if type(self).calls < 3 else [{"game_id": "ab12-1", "title": "AB"}]).encode()
        self.send_response(200 if self.path == "/api/games" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_wait_for_gateway_polls_until_games_are_listed():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Games)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        games = wait_for_gateway(f"http://127.0.0.1:{httpd.server_address[1]}/", 10, "k", poll_s=0.05)
        assert games == [{"game_id": "ab12-1", "title": "AB"}] and _Games.calls >= 3
    finally:
        httpd.shutdown()
    t = time.monotonic()
    with pytest.raises(TimeoutError):
        wait_for_gateway("http://127.0.0.1:9/", 0.3, poll_s=0.05)
    assert time.monotonic() - t < 5


# ---------------------------------------------------------------------------------------
# The fallback policy, over a real game

class _Steps:
    """A policy that plays UP `n` times, then does `then` (return, raise)."""

    name = "fake"

    def __init__(self, n: int, then: BaseException | None = None, on_step=None):
        self.n, self.then, self.on_step, self.played = n, then, on_step, 0

    def play(self, session):
        from duck.game.actions import Action
        for i in range(self.n):
            if self.on_step:
                self.on_step(i)
            session.step(Action(1))
            self.played += 1
        if self.then is not None:
            raise self.then


def _play(tmp_path, policy, **kw):
    source = GameSource.offline(BUNDLED)
    path = tmp_path / "r.jsonl"
    result = play_game(source, "zb01-00000001", policy, max_actions=kw.pop("max_actions", 50), record_path=path, **kw)
    return result, read_record(path)


def test_fallback_takes_over_when_the_model_policy_raises(tmp_path):
    health = ModelHealth(tmp_path / "down")
    llm, explorer = _Steps(3, RuntimeError("boom")), _Steps(4)
    result, rec = _play(tmp_path, FallbackPolicy(lambda: llm, lambda: explorer, health))
    assert (llm.played, explorer.played, result.actions) == (3, 4, 7)
    fallbacks = [e for e in rec.events if e["kind"] == "fallback"]
    assert len(fallbacks) == 1 and "boom" in fallbacks[0]["message"]


def test_fallback_without_a_server_plays_the_explorer_only(tmp_path):
    health = ModelHealth(tmp_path / "down")
    health.mark_down("never started")
    called = []
    result, _ = _play(tmp_path, FallbackPolicy(lambda: called.append(1), lambda: _Steps(3), health))
    assert not called and result.actions == 3


def test_fallback_respects_the_sessions_own_stops(tmp_path):
    health = ModelHealth(tmp_path / "down")
    explorer = _Steps(3)
    result, _ = _play(tmp_path, FallbackPolicy(lambda: _Steps(100), lambda: explorer, health), max_actions=6)
    assert result.end_reason == "max_actions" and result.actions == 6 and explorer.played == 0
    stopped = _Steps(1, PlayStopped("deadline"))
    result, _ = _play(tmp_path, FallbackPolicy(lambda: stopped, lambda: explorer, health))
    assert result.end_reason == "deadline" and explorer.played == 0


def test_model_health_flag(tmp_path):
    h = ModelHealth(tmp_path / "x" / "down")
    assert not h.down()
    h.mark_down("why")
    assert h.down() and (tmp_path / "x" / "down").read_text() == "why"
    h.mark_up()
    assert not h.down()


# ---------------------------------------------------------------------------------------
# Whole runs in-process: an interactive run on the bundled games, no model

def _interactive(tmp_path, monkeypatch, run_class=KaggleRun, **extra) -> KaggleRun:
    inp = tmp_path / "input"
    comp = inp / "competitions" / COMPETITION
    import shutil
    shutil.copytree(BUNDLED, comp / "environment_files")
    env = {"DUCK_KAGGLE__INPUT_DIR": str(inp), "DUCK_KAGGLE__WORKING_DIR": str(tmp_path / "working"),
           "DUCK_KAGGLE__INTERACTIVE_BUDGET_S": "60", "DUCK_KAGGLE__MARGIN_S": "10",
           "DUCK_PLAY__MAX_ACTIONS": "60", "DUCK_SCHEDULER__SLOTS": "3", **extra}
    for k in list(os.environ):
        if k.startswith("DUCK_") or k == "KAGGLE_IS_COMPETITION_RERUN":
            monkeypatch.delenv(k)
    return run_class(env=env)


def test_without_landlock_or_namespaces_the_interactive_run_plays_from_a_root_only_copy(tmp_path, monkeypatch):
    """File modes are then the sandbox's only wall: the games under /kaggle/input (readable by
    anyone) are played from a copy the kernel's uid cannot open, removed at the end."""
    from duck.sandbox.wall.isolation import relies_on_file_modes
    off = ["landlock", "namespaces"]
    if not relies_on_file_modes(off):
        pytest.skip("the uid layer is off here (not root): file modes are no wall at all")
    run = _interactive(tmp_path, monkeypatch, DUCK_KERNEL__LAYERS_OFF=json.dumps(off))
    run.start_model() and run.wait_model()
    run.open_games()
    played_from = run.source.games_dir
    try:
        assert played_from != (run.competition_dir / "environment_files").resolve()
        assert (played_from.parent.stat().st_mode & 0o077) == 0  # root's only
        assert (run.out / "records").stat().st_mode & 0o077 == 0
    finally:
        run.finish()
    assert not played_from.exists()


def test_interactive_run_plays_the_public_games_and_leaves_a_placeholder(tmp_path, monkeypatch):
    run = _interactive(tmp_path, monkeypatch)
    assert run.summary.mode == "interactive" and run.model_dir is None
    assert run.budget_s == 60 and run.deadline == run.t0 + 50  # the interactive budget, less the margin
    assert (run.start_model() and run.wait_model()) is False  # no weights attached: the explorer plays
    assert run.open_games() == ["zb01-00000001", "zc01-00000001", "zs01-00000001"]
    try:
        run.play()
    finally:
        run.finish()
    run.finish()  # twice is harmless
    out = tmp_path / "working"
    summary = json.loads((out / "duck" / "summary.json").read_text())
    assert summary["errors"] == [] and summary["scorecard"]["closed"] is True
    assert summary["runner"].startswith("scheduler.runner")
    assert set(summary["results"]) == set(run.game_ids)
    assert all(r["actions"] > 0 for r in summary["results"].values())
    assert (out / "submission.parquet").exists() and (out / "duck" / "score.json").exists()
    assert len(list((out / "duck" / "records").glob("*.jsonl"))) == 3
    assert summary["ended_at"] - summary["started_at"] < 60


@pytest.mark.parametrize("profile, slots", [("flash-next", 10), ("qwen3.8-27b", 16)])
def test_the_notebook_runner_holds_the_serving_profiles_slots(tmp_path, profile, slots):
    from duck.kaggle.play import scheduler_runner

    cfg = load_config(overrides=[f"model.profile={profile}"], env={})
    runner = scheduler_runner(cfg, None, lambda g: None, tmp_path, time.time() + 100)
    assert runner.slots == cfg.plan.slots == slots and "scheduler.slots" in cfg.derived
    assert runner.policy.name == cfg.scheduler.policy and 99 < runner.budget_s <= 100
    pinned = load_config(overrides=[f"model.profile={profile}", "scheduler.slots=4"], env={})
    assert scheduler_runner(pinned, None, lambda g: None, tmp_path, time.time() + 100).slots == 4


class _PolicyBugOnce(KaggleRun):
    """A bug in one component: making the first game's policy raises (in the scheduler's
    runner, which makes it as it starts the game, so the runner dies)."""

    calls = 0

    def policy_for(self, game_id):
        type(self).calls += 1
        if type(self).calls == 1:
            raise RuntimeError("policy bug")
        return super().policy_for(game_id)


def test_a_failing_runner_leaves_no_game_unplayed(tmp_path, monkeypatch):
    run = _interactive(tmp_path, monkeypatch, run_class=_PolicyBugOnce)
    run.start_model() and run.wait_model()
    run.open_games()
    try:
        run.play()
    finally:
        run.finish()
    summary = json.loads((tmp_path / "working" / "duck" / "summary.json").read_text())
    assert any("policy bug" in e for e in summary["errors"])
    assert "pool for 3" in summary["runner"] and summary["scorecard"]["closed"] is True
    assert all(summary["results"][g]["actions"] > 0 for g in run.game_ids)


def test_missing_inputs_degrade_instead_of_failing(tmp_path, monkeypatch):
    run = _interactive(tmp_path, monkeypatch, DUCK_KAGGLE__INPUT_DIR=str(tmp_path / "empty"))
    assert run.open_games() == []
    run.play()
    run.finish()
    summary = json.loads((tmp_path / "working" / "duck" / "summary.json").read_text())
    assert summary["errors"] and (tmp_path / "working" / "submission.parquet").exists()


def test_a_bad_config_variable_is_dropped_not_fatal(tmp_path, monkeypatch):
    run = _interactive(tmp_path, monkeypatch, DUCK_KAGGLE__NO_SUCH_FIELD="1", DUCK_PLAY__MAX_ACTIONS="many")
    assert run.cfg.kaggle.working_dir == str(tmp_path / "working")  # the good ones are kept
    assert run.cfg.play.max_actions == 1000
    assert len(run.summary.errors) == 2 and all("ignored" in e for e in run.summary.errors)


NEEDS_128 = "# needs: CUDA 12.8, NVIDIA driver >= 570.26 (from nvidia-cuda-runtime-cu12==12.8.90)\nvllm==0.19.0\n"


def _nvidia_smi(bin_dir: Path, script: str) -> dict[str, str]:
    """A stand-in `nvidia-smi` first on PATH; returns the environment that finds it."""
    import os
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


@pytest.mark.parametrize("script, ok, words", [
    ('echo "580.95.05, NVIDIA RTX PRO 6000 Blackwell Server Edition"', True, "runs CUDA 12.8"),
    ('echo "570.26, NVIDIA RTX PRO 6000"', True, "needs >= 570.26"),
    ('echo "565.57.01, NVIDIA RTX PRO 6000"', False, "older than 570.26"),
    ('echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2; exit 9', False,
     "found no GPU"),
])
def test_driver_check_against_the_lock(tmp_path, script, ok, words):
    from duck.kaggle.inputs import check_driver
    lock = tmp_path / "vllm.lock"
    lock.write_text(NEEDS_128)
    got, text = check_driver(lock, _nvidia_smi(tmp_path / "bin", script))
    assert got is ok and words in text, text


def test_no_nvidia_smi_means_no_vllm(tmp_path):
    from duck.kaggle.inputs import check_driver
    lock = tmp_path / "vllm.lock"
    lock.write_text(NEEDS_128)
    got, text = check_driver(lock, {"PATH": str(tmp_path / "nothing-here")})
    assert got is False and "no nvidia-smi" in text


def test_an_old_driver_sends_the_notebook_to_the_explorer_without_starting_vllm(tmp_path, monkeypatch):
    """The notebook reads the lock's requirement, asks nvidia-smi, and plays with the
    explorer at once: no vLLM install, no server, no waiting."""
    dataset = tmp_path / "input" / "datasets" / "someone" / "duck-arc3-wheels"
    model = tmp_path / "input" / "models" / "qwen-lm" / "qwen3.6-27b-fp8" / "transformers" / "default" / "1"
    for d in (dataset / "wheels", model):
        d.mkdir(parents=True)
    (dataset / DATASET_MARKER).write_text("{}")
    (dataset / "vllm.lock").write_text(NEEDS_128)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    smi = _nvidia_smi(tmp_path / "bin", 'echo "550.54.15, Tesla T4"')
    run = _interactive(tmp_path, monkeypatch, DUCK_KAGGLE__INPUT_DIR=str(tmp_path / "input"), **smi,
                       DUCK_MODEL__NAME="Qwen3.6-27B-FP8", DUCK_MODEL__SERVE__EXECUTABLE=str(tmp_path / "no-vllm"))
    t = time.monotonic()
    assert (run.start_model() and run.wait_model()) is False
    assert time.monotonic() - t < 30 and run.server is None  # no boot waited for (ready_timeout_s: 900)
    m = json.loads((tmp_path / "working" / "duck" / "summary.json").read_text())["model"]
    assert "550.54.15" in m["driver"] and "older than 570.26" in m["status"] and "explorer" in m["status"]
    assert [s["name"] for s in json.loads((tmp_path / "working" / "duck" / "summary.json").read_text())["steps"]
            ][-1] == "gpu_driver"


def test_the_vllm_lock_is_the_stack_for_flash_next():
    """vLLM 0.33.0 (it registers Qwen4Exp, Flash-Next's architecture), torch 2.14.0 built for
    CUDA 13.0, transformers < 5.21 and flashinfer 0.7.2.post1 (FIELD §4), and the driver line
    the notebook checks, consistent with the lock's CUDA runtime and below Kaggle's 580.159.04."""
    from duck.kaggle.inputs import _version, lock_driver_requirement
    lock = Path(__file__).resolve().parent.parent / "kaggle-dataset" / "vllm.lock"
    pins = dict(line.split("  #")[0].split("==") for line in lock.read_text().splitlines()
                if line and not line.startswith("#"))
    assert (pins["vllm"], pins["torch"], pins["flashinfer-python"]) == ("0.33.0", "2.14.0", "0.7.2.post1")
    assert _version(pins["transformers"]) < (5, 21) and pins["nvidia-cuda-runtime"].startswith("13.0.")
    cuda, driver = lock_driver_requirement(lock)
    assert cuda == "13.0" and _version(driver) <= _version("580.159.04")
    assert "vllm==0.33.0" in (lock.parent.parent / "pyproject.toml").read_text()


def test_kernel_metadata_names_the_profiles_model_and_a_pinned_image():
    from duck.config import profiles
    meta = json.loads((Path(__file__).resolve().parent.parent / "kaggle-dataset" / "kernel-metadata.json").read_text())
    assert meta["model_sources"] == [profiles.get(profiles.DEFAULT_PROFILE).kaggle_model + "/1"]
    assert "@sha256:" in meta["docker_image"]  # by digest: the default image moved to Python 3.13
    assert meta["enable_internet"] is False and meta["machine_shape"] == "NvidiaRtxPro6000"


def test_a_python_other_than_the_wheels_is_refused_in_one_line(tmp_path):
    from duck.kaggle.inputs import check_python
    (tmp_path / "duck-dataset.json").write_text(json.dumps({"python": "3.12"}))
    assert check_python(tmp_path, (3, 12))[0] is True
    ok, why = check_python(tmp_path, (3, 13))
    assert ok is False and "3.13" in why and "digest" in why and "\n" not in why
    assert check_python(tmp_path / "nothing", (3, 13))[0] is True  # no dataset: nothing to compare


def test_made_ahead_games_cost_no_action_and_are_handed_out_once(bundled):
    """duck.kaggle.prepare: every game made while vLLM loads; play gets that very game, at 0
    actions; a game being made ahead is waited for, never made a second time."""
    import threading
    from duck.game.source import GameSource
    from duck.kaggle.prepare import PreparedSource
    source = GameSource.offline(bundled)
    made: list[str] = []
    real_make = source.make

    def counting_make(game_id):  # (what the gateway sees: one make() per game)
        made.append(game_id)
        return real_make(game_id)
    source.make = counting_make
    prepared = PreparedSource(source)
    ids = prepared.game_ids()
    t = prepared.prepare_in_background(ids)
    got = {}
    racers = [threading.Thread(target=lambda g=g: got.setdefault(g, prepared.make(g))) for g in ids]
    for r in racers:
        r.start()
    for r in racers:
        r.join(60)
    t.join(60)
    assert sorted(made) == sorted(ids)  # each game made exactly once, by whichever came first
    assert all(g.actions == 0 and g.obs is not None for g in got.values())  # the game-creating RESET is free
    assert prepared.report()["unused"] == 0 and prepared.competition is False  # (the rest is the source's)
    again = prepared.make(ids[0])  # a second play of one game: made anew, as before
    assert again is not got[ids[0]] and made.count(ids[0]) == 2


def test_the_server_starts_first_and_the_games_are_made_while_it_loads(tmp_path, monkeypatch):
    """The boot order: start_model() returns at once, open_games() makes every game while the
    stand-in vLLM still loads (it listens only once the test lets it: DUCK_STANDIN_BOOT_UNTIL,
    so that a slow machine cannot make it ready first), wait_model() then waits; play gets the
    games made ahead."""
    from duck.game.gateway import free_port
    from devkit.rehearse.layout import write_standin
    exe = write_standin(tmp_path / "bin" / "vllm")
    model = tmp_path / "input" / "models" / "intel" / "qwen3.8-flash-next" / "transformers" / "w4a16-autoround" / "1"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("DUCK_STANDIN_BOOT_UNTIL", str(tmp_path / "loaded"))
    run = _interactive(tmp_path, monkeypatch, DUCK_MODEL__SERVE__EXECUTABLE=str(exe),
                       DUCK_MODEL__SERVE__PORT=str(free_port()), DUCK_KAGGLE__MODEL_DIR=str(model),
                       DUCK_MODEL__SERVE__READY_TIMEOUT_S="40", DUCK_KAGGLE__INTERACTIVE_BUDGET_S="90")
    t0 = time.monotonic()
    assert run.start_model() is True and time.monotonic() - t0 < 20  # started, not waited for (its 40 s)
    ids = run.open_games()
    assert run.source.wait(30) and run.source.report()["made_ahead"] == len(ids) == 3
    assert run.server.ready_s is None  # every game made before the server was ready
    (tmp_path / "loaded").touch()
    assert run.wait_model() is True
    names = [s.name for s in run.summary.steps]
    assert names.index("serve_start") < names.index("open_games") < names.index("serve")
    try:
        run.play()
    finally:
        run.finish()
    doc = json.loads((tmp_path / "working" / "duck" / "summary.json").read_text())
    assert doc["model"]["prepared_games"]["made_ahead"] == 3 and doc["model"]["prepared_games"]["unused"] == 0
    assert doc["model"]["started_at_s"] < doc["model"]["ready_at_s"]
    assert all(r.get("actions", 0) > 0 for r in doc["results"].values())
