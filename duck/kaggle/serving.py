"""The notebook's model server across its boots: start, wait, watch, restart on the ladder.

`Supervisor` owns the `vllm serve` process of a notebook run (duck.kaggle.run delegates to it)
and the health flag the games read (duck.llm.health). Each boot serves one rung of the profile's
restart ladder (duck.config.profiles.LADDER), the first `kaggle.start_rung` (what `duck doctor
--soak` decided); a boot that fails, or crashes or wedges within `kaggle.climb_within_s` of
being ready, sends the next one a rung up, and a later crash restarts the same rung. After a
crash or a wedge the server restarts while the games' time left exceeds a boot plus
`kaggle.restart_min_left_s` of play; meanwhile the flag says "coming back" and the model games
park (duck.policies.Parking), and when no restart can come in time it says "gone" and the
explorer takes them. On a rung with MTP, below `kaggle.min_mtp_tokens_per_step` tokens a step
(its /metrics: duck.llm.metrics) the server restarts a rung up. Every boot is a `Boot` in
summary.json's `model.boots` and run.log. The rules in full: docs/serving.md, "Restarts in
the notebook".
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duck.config.profiles as profiles
from duck.config import Config, at_rung
from duck.llm import metrics as vllm_metrics
from duck.llm.health import ModelHealth, probe_model
from duck.llm.serve import VLLMServer

log = logging.getLogger("duck.kaggle.run")

# vllm.log lines that name why a server ended (NVIDIA's Xid, CUDA's faults, Python's errors).
CAUSE = re.compile(r"\bXid\b|illegal memory access|out of memory|OutOfMemory|CUDA error|Traceback|"
                   r"\b[A-Z][A-Za-z]*(Error|Exception)\b|dying|Killed|core dumped", re.I)


def cause_lines(text: str, n: int = 6) -> list[str]:
    """The last `n` lines of a boot's log that name a cause (CAUSE), each cut to 300 characters."""
    return [line.strip()[:300] for line in text.splitlines() if CAUSE.search(line)][-n:]


@dataclass
class Boot:
    """One start of the server (times in seconds since the notebook started)."""

    rung: int
    name: str  # the rung's name ("as planned", "MTP off", ...)
    settings: dict[str, Any]  # the serve fields that shape the engine on this rung
    started_at_s: float
    ready_s: float | None = None  # from start to ready
    ready_at_s: float | None = None
    ended_at_s: float | None = None
    uptime_s: float | None = None  # from ready to its end
    end: str | None = None  # did not come up | crashed | wedged | MTP below the minimum | stopped at the run's end
    cause: list[str] = field(default_factory=list)  # vllm.log's lines that name it
    mtp: dict[str, Any] | None = None  # the acceptance read from /metrics, on a rung with MTP


class Supervisor:
    """The server of one notebook run (the module docstring). `left()` is the games' time
    left; `step(name)` the run's step recorder; `on_change()` writes the summary."""

    def __init__(self, cfg: Config, health: ModelHealth, out: Path, t0: float, left: Callable[[], float],
                 step: Callable[[str], Any], model: dict[str, Any], on_change: Callable[[], None]) -> None:
        self.cfg, self.health, self.out, self.t0 = cfg, health, out, t0
        self.left, self.step, self.model, self.on_change = left, step, model, on_change
        self.ladder = profiles.get(cfg.model.profile).ladder or (profiles.Rung("as planned"),)
        self.rung = min(cfg.kaggle.start_rung, len(self.ladder) - 1)
        self.server: VLLMServer | None = None
        self.url: str | None = None
        self.boots: list[Boot] = []
        self._log_at = 0  # where the current boot's part of vllm.log begins
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._mtp_base: dict[str, Any] | None = None
        model["boots"] = self.boots

    def _at(self) -> float:
        return round(time.time() - self.t0, 1)

    # -- one boot ----------------------------------------------------------------------------------
    def launch(self) -> None:
        """Start the server on the current rung (not waiting for it)."""
        rcfg = at_rung(self.cfg, self.rung)
        log_path = self.out / "vllm.log"
        self._log_at = log_path.stat().st_size if log_path.exists() else 0
        log.info("starting the model server on rung %d (%s)", self.rung, self.ladder[self.rung].name)
        at = self._at()
        self.server = VLLMServer(rcfg.model, log_path=log_path).start()
        s = self.server.serve  # as started: MTP off where the checkpoint holds no drafter (duck.llm.drafter)
        self.boots.append(Boot(self.rung, self.ladder[self.rung].name,
                               {"mtp_tokens": s.mtp_tokens, "cudagraph_mode": s.cudagraph_mode or "vLLM's default",
                                "enforce_eager": s.enforce_eager, "max_num_seqs": s.max_num_seqs,
                                "mtp_check": self.server.mtp_check.line}, at))
        self.model["rung"] = self.rung

    def await_ready(self) -> bool:
        """Ready when /v1/models lists the model and a smoke chat succeeds, bounded by the
        budget. False (the server stopped, the boot recorded) when it does not come up."""
        timeout = max(1.0, min(self.cfg.model.serve.ready_timeout_s, self.left() - 60))
        try:
            ready_s = self.server.wait_ready(timeout)
        except Exception as e:  # ServeError: crashed, timed out, or the smoke chat failed
            self.model["status"] = f"did not come up ({type(e).__name__}): the explorer plays"
            self.model["error"] = str(e)[-2000:]
            log.error("vLLM did not come up: %s", e)
            self.server.stop()
            self._ended("did not come up")
            return False
        boot = self.boots[-1]
        boot.ready_s, boot.ready_at_s = round(ready_s, 1), self._at()
        self.url = self.server.url
        self.model.update(url=self.url, ready_s=boot.ready_s, ready_at_s=boot.ready_at_s,
                          chat_template=getattr(self.server, "chat_template_choice", None))
        self._mtp_base = None
        self.health.mark_up()
        self.on_change()
        return True

    def boot(self) -> bool:
        """Wait for the launched server; when it does not come up, the next rung while time
        allows (a boot that fails on the top rung ends the tries). True when one is ready."""
        while not self.await_ready():
            if self.rung >= len(self.ladder) - 1 or not self.may_restart():
                return False
            self.climb("did not come up")
            with self.step("serve_restart"):
                self.launch()
        return True

    def _ended(self, end: str) -> None:
        """Record how the current boot ended, with the causes its log names."""
        boot = self.boots[-1]
        if boot.end is not None:
            return
        boot.end, boot.ended_at_s = end, self._at()
        if boot.ready_at_s is not None:
            boot.uptime_s = round(boot.ended_at_s - boot.ready_at_s, 1)
        try:
            with open(self.out / "vllm.log", "rb") as f:
                f.seek(self._log_at)
                boot.cause = cause_lines(f.read().decode("utf-8", "replace"))
        except OSError:
            pass
        log.warning("model server boot %d (rung %d) ended: %s after %s s up; %s", len(self.boots), boot.rung, end,
                    boot.uptime_s, " | ".join(boot.cause[-3:]) or "no cause in vllm.log")
        self.on_change()

    # -- the run's lifetime ------------------------------------------------------------------------
    def boot_estimate_s(self) -> float:
        """How long a boot takes: the longest of this run's, else the ready time-out."""
        seen = [b.ready_s for b in self.boots if b.ready_s is not None]
        return max(seen) if seen else self.cfg.model.serve.ready_timeout_s

    def may_restart(self) -> bool:
        k = self.cfg.kaggle
        return k.restart and not self._stop.is_set() and self.left() > self.boot_estimate_s() + k.restart_min_left_s

    def climb(self, end: str) -> None:
        """The next boot's rung: one up after a failed boot, an early crash or wedge, or MTP
        below the minimum; the same after a late one."""
        boot = self.boots[-1]
        early = boot.uptime_s is None or boot.uptime_s <= self.cfg.kaggle.climb_within_s
        if (early or end.startswith("MTP")) and self.rung < len(self.ladder) - 1:
            self.rung += 1

    def start_monitor(self) -> None:
        self._monitor = threading.Thread(target=self._watch, name="duck-model-health", daemon=True)
        self._monitor.start()

    def halt(self) -> None:
        """No restart from now on (the run is ending)."""
        self._stop.set()

    def stop(self) -> None:
        """At the run's end: the monitor and the server stopped, the last boot recorded."""
        self._stop.set()
        if self.server is not None:
            self.server.stop()
            if self.boots:
                self._ended("stopped at the run's end")

    def _watch(self) -> None:
        try:
            self._watch_loop()
        except Exception as e:  # a bug here must not leave the games parked for ever
            log.exception("the model monitor failed: %s", e)
            self.health.mark_down(f"the model monitor failed ({type(e).__name__}: {e})")

    def _watch_loop(self) -> None:
        k = self.cfg.kaggle
        failures = 0
        while not self._stop.wait(k.health_interval_s):
            alive = self.server is not None and self.server.alive()
            # A one-token chat: a wedged server still answers /v1/models, not this.
            if alive and probe_model(self.url, k.health_timeout_s):
                failures = 0
                if self.health.down() and self.health.coming_back():
                    self.health.mark_up()  # a game's probe failed, ours answers: nothing to restart
                if self._mtp_too_low() and self.may_restart():  # (else it serves on, slower)
                    self._outage("MTP below the minimum", "MTP accepted too few tokens a step")
                continue
            failures = failures + 1 if alive else k.health_failures
            if failures >= k.health_failures:
                end = "crashed" if not alive else "wedged"
                self._outage(end, "the server process ended" if not alive else f"{failures} probes failed")
                if self.health.down():
                    return  # gone for good: the explorer plays the rest
                failures = 0

    def _outage(self, end: str, reason: str) -> None:
        """The server is down: record the boot, and restart (climbing the ladder) while time
        allows; else mark it gone."""
        coming = self.may_restart()
        self.health.mark_down(reason, coming_back=coming)
        self.model.setdefault("down", []).append({"at_s": self._at(), "reason": reason, "coming_back": coming})
        try:
            self.server.stop()  # a wedged server: fail its open requests now
        except Exception as e:
            log.warning("stopping the model server: %s", e)
        self._ended(end)
        if self.may_restart():
            self.climb(end)
            with self.step("serve_restart"):
                self.launch()
            if self.boot():
                self.model["status"] = "ready"
                self.model.setdefault("restarted_at_s", []).append(self._at())
                return
        self.health.mark_down(f"{reason}; no restart can come in time", quiet=self._stop.is_set())
        self.model["status"] = "down for good: the explorer plays the rest"
        self.on_change()

    def _mtp_too_low(self) -> bool:
        """On a rung with MTP, once enough tokens were generated since ready: True when the
        tokens a step fall below the minimum (recorded in the boot either way, once)."""
        boot, k = self.boots[-1], self.cfg.kaggle
        if not boot.settings.get("mtp_tokens") or boot.mtp is not None:
            return False
        try:
            now = vllm_metrics.fetch(self.url, timeout=10.0)
        except vllm_metrics.MetricsError as e:
            log.info("%s", e)
            return False
        if self._mtp_base is None:
            self._mtp_base = now
            return False
        d = vllm_metrics.delta(self._mtp_base, now)
        if (d.get("generation_tokens") or 0) < k.mtp_check_tokens:
            return False
        boot.mtp = vllm_metrics.mtp(d) or {"tokens_per_step": None, "note": "no spec-decode counters"}
        tps = boot.mtp.get("tokens_per_step")
        log.info("MTP on rung %d: %s", boot.rung, boot.mtp)
        self.on_change()
        return tps is not None and tps < k.min_mtp_tokens_per_step



def boots_line(boots: list[Boot]) -> str:
    """The boots in one line of the run's last log line: `rung 0 crashed after 31 s up; ...`."""
    return "; ".join(f"rung {b.rung} {b.end or 'up'}" + (f" after {b.uptime_s:.0f} s up" if b.uptime_s else "")
                     for b in boots) or "none"
