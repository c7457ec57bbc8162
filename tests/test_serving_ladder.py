"""The notebook's server across its boots (duck.kaggle.serving, issue 35 "A restart ladder",
"MTP only when it works"): a real stand-in `vllm` subprocess on each rung; the climb rule;
the causes read from vllm.log; the retired `kaggle.model_restarts`.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

from duck.config import load_config
from duck.game.gateway import free_port
from duck.kaggle.serving import Boot, Supervisor, cause_lines
from duck.llm.client import smoke_chat
from duck.llm.health import ModelHealth
from devkit.rehearse.layout import write_standin


@contextmanager
def _step(name):
    yield None


def _supervisor(tmp_path, *sets, left=lambda: 600.0):
    exe = write_standin(tmp_path / "bin" / "vllm")
    cfg = load_config(overrides=[f"model.serve.executable={exe}", f"model.serve.port={free_port()}",
                                 "model.serve.ready_timeout_s=30", "kaggle.health_interval_s=0.5",
                                 "kaggle.health_timeout_s=3", "kaggle.restart_min_left_s=10", *sets], env={})
    model: dict = {}
    return Supervisor(cfg, ModelHealth(tmp_path / "down"), tmp_path, time.time(), left, _step, model,
                      lambda: None), model


def test_mtp_that_accepts_too_few_tokens_restarts_the_server_a_rung_up(tmp_path, monkeypatch):
    """The stand-in serves spec-decode counters at 1.2 tokens a step on its MTP boot: once the
    server has generated `kaggle.mtp_check_tokens`, the monitor reads /metrics, records the
    acceptance, and restarts on rung 1 (MTP off), where no counters are served."""
    monkeypatch.setenv("DUCK_STANDIN_MTP_STEP_TOKENS", "1.2")
    sup, model = _supervisor(tmp_path, "kaggle.mtp_check_tokens=60")
    sup.launch()
    try:
        assert sup.boot() and sup.boots[0].settings["mtp_tokens"] == 3
        sup.start_monitor()
        deadline = time.monotonic() + 60
        while len(sup.boots) < 2 or sup.boots[-1].ready_s is None:
            assert time.monotonic() < deadline, model
            try:
                smoke_chat(sup.url, sup.cfg.model, timeout_s=5, retries=0)  # traffic: generated tokens
            except Exception:
                time.sleep(0.2)  # (restarting)
        first, second = sup.boots
        assert first.end == "MTP below the minimum" and first.mtp["tokens_per_step"] < 1.5
        assert (first.rung, second.rung, second.settings["mtp_tokens"]) == (0, 1, 0)
        assert model["rung"] == 1 and model["down"][0]["coming_back"] is True
    finally:
        sup.stop()
    assert sup.boots[-1].end == "stopped at the run's end" and sup.boots[-1].uptime_s is not None


def test_a_server_that_never_comes_up_is_tried_once_per_rung_then_left(tmp_path, monkeypatch):
    monkeypatch.setenv("DUCK_STANDIN_EXIT_AT_ONCE", "1")
    sup, model = _supervisor(tmp_path)
    sup.launch()
    assert sup.boot() is False
    assert [(b.rung, b.end) for b in sup.boots] == [(r, "did not come up") for r in range(4)]
    assert sup.boots[0].cause == [] and "did not come up" in model["status"]


def test_the_climb_rule_and_the_time_rule(tmp_path):
    """A crash within `climb_within_s` of ready climbs a rung, a later one stays; the top rung
    is the last. A restart needs a boot (the longest seen, else the ready time-out) plus
    `restart_min_left_s` of play left, and `kaggle.restart`."""
    left = [600.0]
    sup, _ = _supervisor(tmp_path, "kaggle.climb_within_s=100", left=lambda: left[0])
    sup.boots.append(Boot(0, "as planned", {}, 0.0, ready_s=20.0, uptime_s=50.0))
    sup.climb("crashed")
    assert sup.rung == 1
    sup.boots.append(Boot(1, "MTP off", {}, 0.0, ready_s=25.0, uptime_s=5000.0))
    sup.climb("wedged")
    assert sup.rung == 1  # late: the same rung again
    sup.rung = 3
    sup.climb("crashed")
    assert sup.rung == 3
    assert sup.boot_estimate_s() == 25.0 and sup.may_restart()
    left[0] = 34.0  # < 25 + 10
    assert not sup.may_restart()
    off, _ = _supervisor(tmp_path, "kaggle.restart=false")
    assert not off.may_restart()


def test_the_cause_lines_of_a_boot_name_the_fault():
    log = "\n".join(["INFO 10-01 loading weights", "INFO step 5", "NVRM: Xid (PCI:0000:01:00): 31, pid=12",
                     "Traceback (most recent call last):", '  File "x.py", line 3', "torch.AcceleratorError: CUDA "
                     "error: an illegal memory access was encountered", "INFO shutting down",
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    got = cause_lines(log)
    assert got == ["NVRM: Xid (PCI:0000:01:00): 31, pid=12", "Traceback (most recent call last):",
                   "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert cause_lines("INFO all fine\nINFO still fine") == []


def test_the_retired_restart_count_still_loads(caplog):
    """`kaggle.model_restarts` (a count, before the ladder): 0 is no restart, any other count
    restarts while time allows; a warning says so (run.json of 8ea88b8 holds 1)."""
    with caplog.at_level(logging.WARNING):
        assert load_config(overrides=["kaggle.model_restarts=0"], env={}).kaggle.restart is False
        assert load_config(env={"DUCK_KAGGLE__MODEL_RESTARTS": "2"}).kaggle.restart is True
    assert "kaggle.model_restarts is retired" in caplog.text


def test_a_boot_records_mtp_off_when_the_checkpoint_holds_no_drafter(tmp_path):
    """A profile with MTP on a checkpoint whose index maps no `mtp.` tensor: the boot is
    recorded as served (mtp_tokens 0) with the check's line, not as the rung planned it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"model.embed_tokens.weight": "a"}}')
    sup, _ = _supervisor(tmp_path, f"model.serve.model_path={folder}")
    sup.launch()
    try:
        assert sup.boot()
        settings = sup.boots[0].settings
        assert settings["mtp_tokens"] == 0 and "served without MTP" in settings["mtp_check"], settings
    finally:
        sup.stop()
