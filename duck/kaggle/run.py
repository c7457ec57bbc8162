"""The Kaggle notebook's orchestration: everything `notebook.py` calls, in order.

    run = KaggleRun(started_at=T0)     # mode, config, paths, budget
    run.start_model()                  # vLLM's venv from the wheel dataset, then `duck serve` starts
    run.open_games()                   # while it loads: the gateway (rerun) or the public games
                                       # (interactive), every game made ahead (no action spent)
    run.wait_model()                   # until it answers (or the explorer plays)
    try:
        run.play()                     # the scheduler's runner over every listed game
    finally:
        run.finish()                   # scorecard closed, vLLM stopped, outputs written

The rule: nothing here may stop the notebook. Every step catches what goes wrong, logs it, keeps
it in `summary.json` and degrades (no model server: the explorer plays; a game that raises is
recorded, the others go on). Modes, policy, restarts, outputs: docs/kaggle.md. The steps rely on
duck.kaggle.inputs, .play, .outputs and .serving, and duck.llm.health.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

from duck.config import Config
from duck.game.source import GameSource
from duck.kaggle.inputs import (check_driver, check_python, env_config, find_competition_dir, find_dataset_dir,
                                find_model_dir, install_vllm, is_rerun, notebook_policy)
from duck.kaggle.outputs import Step, Summary, log_to_file, write_placeholder_submission
from duck.kaggle.prepare import PreparedSource
from duck.kaggle.serving import Supervisor, boots_line
from duck.kaggle.play import run_pool, run_scheduler, scheduler_runner, wait_for_gateway
from duck.llm.health import ModelHealth
from duck.play.scoring import write_score
from duck.policies import FallbackPolicy, make_policy
from duck.sandbox.fallback import games_for_play


log = logging.getLogger("duck.kaggle.run")


class KaggleRun:
    """One notebook run. Each public method is a notebook cell's work and never raises."""

    def __init__(self, started_at: float | None = None, config: Config | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.t0 = time.time() if started_at is None else started_at
        self.config_errors: list[str] = []
        if config is None:  # (a variable that does not validate is dropped and reported, not fatal)
            config, self.config_errors = env_config(self.env)
        self.cfg = config
        k = self.cfg.kaggle
        self.rerun = is_rerun(self.env)
        self.budget_s = k.budget_s if self.rerun else k.interactive_budget_s
        self.deadline = self.t0 + self.budget_s - k.margin_s  # games end by then (wall clock)
        self.working = Path(k.working_dir)
        self.out = self.working / "duck"
        self.out.mkdir(parents=True, exist_ok=True)
        log_to_file(self.out / "run.log", log.name)
        self.summary = Summary("rerun" if self.rerun else "interactive", self.t0, self.budget_s, self.deadline)
        self.summary.errors += self.config_errors
        self.health = ModelHealth(self.out / "model_down")
        self.health.mark_down("not started", quiet=True)
        self.serving = Supervisor(self.cfg, self.health, self.out, self.t0, self.left, self.step,
                                  self.summary.model, self._write_summary)
        self.source: Any = None
        self.game_ids: list[str] = []
        self._finished = False
        self._exits = ExitStack()  # the root-only copy of the games, if one was made
        with self.step("locate"):
            self.competition_dir = find_competition_dir(k.input_dir, k.competition_dir)
            self.dataset_dir = find_dataset_dir(k.input_dir, k.dataset_dir)
            self.model_dir = find_model_dir(k.input_dir, self.cfg.model.name, k.model_dir)
            self.summary.paths = {"competition": _s(self.competition_dir), "dataset": _s(self.dataset_dir),
                                  "model": _s(self.model_dir), "working": str(self.working)}
        self.policy: str | None = None  # (play.policy, the packed one, or None: the model agent)
        with self.step("policy"):
            self.policy, problem = notebook_policy(
                self.cfg.play.policy if "policy" in self.cfg.play.model_fields_set else None, self.dataset_dir)
            self.summary.model["policy"] = self.policy or "llm (the explorer while no model answers)"
            if problem:  # a user's policy that cannot play (changed since packed, broken): the default plays
                raise ValueError(f"{problem}: the default plays (the model agent, or the explorer)")
        log.info("mode %s, budget %.0f s (games end %.0f s from the start), paths %s", self.summary.mode,
                 self.budget_s, self.deadline - self.t0, self.summary.paths)

    # -- bookkeeping ------------------------------------------------------------------

    def left(self) -> float:
        """Seconds until the games must have ended."""
        return self.deadline - time.time()

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        s = Step(name, round(time.time() - self.t0, 1))
        self.summary.steps.append(s)
        t = time.monotonic()
        try:
            yield s
        except Exception as e:  # a notebook cell must never fail: keep going, degraded
            s.ok, s.error = False, f"{type(e).__name__}: {e}"
            log.error("step %s failed: %s\n%s", name, s.error, traceback.format_exc(limit=8))
            self.summary.errors.append(f"{name}: {s.error}")
        finally:
            s.seconds = round(time.monotonic() - t, 1)
            self._write_summary()

    def _write_summary(self) -> None:
        try:
            doc = asdict(self.summary)
            (self.out / "summary.json").write_text(json.dumps(doc, indent=1, default=str))
        except Exception as e:  # informative only
            log.warning("could not write summary.json: %s", e)

    # -- the model server ----------------------------------------------------------------

    def start_model(self) -> bool:
        """Install vLLM from the dataset and start `duck serve` without waiting for it; True
        when it was started (wait_model() then waits for it to answer)."""
        m = self.summary.model
        if not self.cfg.kaggle.use_model or self.policy not in (None, "llm"):
            m["status"] = "off (kaggle.use_model=false)" if not self.cfg.kaggle.use_model else \
                f"off (play.policy {self.policy} needs no model)"
            return False
        if self.model_dir is None:
            return self._not_started(f"no weights for {self.cfg.model.name} under {self.cfg.kaggle.input_dir}")
        self.cfg.model.serve.model_path = m["model_path"] = str(self.model_dir)
        plan = self.cfg.plan
        m["plan"] = {"profile": plan.profile, "slots": plan.slots, "context_tokens": plan.context_tokens,
                     "kv_tokens": plan.kv_tokens, "problems": plan.problems}
        if plan.problems:  # a server that cannot hold its games: nothing starts
            return self._not_started(f"not started (the {plan.profile} plan does not fit: {'; '.join(plan.problems)})")
        lock = self.dataset_dir / "vllm.lock" if self.dataset_dir is not None else None
        if lock is not None and lock.is_file():
            with self.step("gpu_driver") as s:
                ok, m["driver"] = check_driver(lock, self.env)
                log.info("GPU driver: %s", m["driver"])
                if not ok:  # a server that can never come up: play with the explorer at once
                    s.ok = False
                    return self._not_started(f"not started ({m['driver']})")
            family = self.cfg.model.serve.chat_template_family
            template = self.dataset_dir / family / "chat_template.jinja"
            if template.is_file():  # the copy served when the model's template lacks preserve_thinking
                self.cfg.model.serve.fallback_chat_template = str(template)
        if self.dataset_dir is not None:
            ok, m["python"] = check_python(self.dataset_dir)
            if not ok:  # vLLM's wheels would not install: the explorer plays
                return self._not_started(f"not started ({m['python']})")
        with self.step("install_vllm"):
            if self.dataset_dir is not None:
                exe = install_vllm(self.dataset_dir, Path(self.cfg.kaggle.vllm_env_dir))
                if exe is not None:
                    self.cfg.model.serve.executable = str(exe)
            m["executable"] = self.cfg.model.serve.executable
        with self.step("serve_start"):
            self.serving.launch()
            m["started_at_s"] = round(time.time() - self.t0, 1)
            return True
        return False  # (the step caught an error)

    def _not_started(self, why: str) -> bool:
        self.summary.model["status"] = f"{why}: the explorer plays"
        log.warning(self.summary.model["status"])
        return False

    def wait_model(self) -> bool:
        """Wait for the started server to answer; True when it does (the monitor then runs:
        duck.kaggle.serving restarts it on the ladder while time allows)."""
        if self.server is None:
            return False
        with self.step("serve") as s:
            if self.serving.boot():
                self.summary.model["status"] = "ready"
                self.serving.start_monitor()
                return True
            s.ok = False
        self.summary.model.setdefault("status", "did not come up: the explorer plays")
        return False

    @property
    def server(self) -> Any:
        """The current vLLM process (None before start_model)."""
        return self.serving.server

    @property
    def model_url(self) -> str | None:
        """The server's URL once it was ready (None: the model never answered)."""
        return self.serving.url

    # -- the games -------------------------------------------------------------------------

    def open_games(self) -> list[str]:
        """The game source and the list of games to play (the rerun waits for the gateway)."""
        k = self.cfg.kaggle
        with self.step("open_games"):
            if self.rerun:
                wait_for_gateway(k.gateway_url, min(k.gateway_wait_s, max(0.0, self.left())), k.api_key)
                self.source = GameSource.competition(k.gateway_url, k.api_key)
            else:
                if self.competition_dir is None:
                    raise FileNotFoundError(f"no competition data with environment_files/ under {k.input_dir}")
                # Where file modes are the sandbox's only wall, a root-only copy (duck.run).
                games = self._exits.enter_context(games_for_play(self.competition_dir / "environment_files",
                                                                 self.out / "records", self.cfg.kernel.layers_off))
                self.source = GameSource.offline(games)
            ids = [g.game_id for g in self.source.games()]
            if not self.rerun and k.interactive_games > 0:
                ids = ids[:k.interactive_games]
            self.game_ids = ids
            self.summary.games = ids
            self.summary.scorecard["card_id"] = self.source.open_scorecard(tags=["duck", self.summary.mode])
            log.info("%d games to play: %s", len(ids), " ".join(ids))
            # While vLLM loads: every game made ahead, in the background (no action spent).
            self.source = PreparedSource(self.source)
            self.source.prepare_in_background(ids, deadline=self.deadline)
        return self.game_ids

    def policy_for(self, game_id: str) -> Any:
        """The policy a game starts with: play.policy (or the packed one) when set, else the model
        agent while the server is up, else the explorer; the agent and a user's policy play inside
        the fallback (agent.fallback takes the game over from where it stands when they fail)."""
        seed, spec, cfg = self.cfg.play.seed, self.policy, self.cfg
        if spec in (None, "llm"):
            return make_policy("llm", seed, config=cfg, model_url=self.model_url, health=self.health) \
                if self.model_url is not None else make_policy("explorer", seed, config=cfg)
        mine = make_policy(spec, seed, config=cfg)
        if ":" not in spec or cfg.agent.fallback is None:
            return mine
        wrapped = FallbackPolicy(lambda: mine, lambda: make_policy(cfg.agent.fallback, seed, config=cfg))
        wrapped.name, wrapped.yields_in_step = mine.name, getattr(mine, "yields_in_step", False)
        return wrapped

    def play(self) -> dict[str, dict[str, Any]]:
        """Every listed game through the scheduler's runner, ending by the deadline."""
        if self.source is None or not self.game_ids:
            log.error("no games to play")
            return {}
        k = self.cfg.kaggle
        if isinstance(self.source, PreparedSource):
            self.summary.model["prepared_games"] = self.source.report()
        with self.step("play"):
            runner = scheduler_runner(self.cfg, self.source, self.policy_for, self.out / "records", self.deadline)
            self.summary.runner = (f"scheduler.runner ({runner.policy.name}, {runner.slots} slots, "
                                   f"{runner.budget_s:.0f} s)")
            self.summary.results.update(run_scheduler(runner, self.game_ids, self.deadline, k.stop_grace_s))
        if isinstance(self.source, PreparedSource):  # (again: how many of them play used)
            self.summary.model["prepared_games"] = self.source.report()
        # Games the runner never started (no record: play_game writes one first thing) are
        # played here, so that no game is left at 0 for a bug in one component. A started
        # game is never made twice (the gateway allows one make() per game).
        missing = [g for g in self.game_ids if g not in self.summary.results and not self._record_path(g).exists()]
        if missing and self.left() > k.stop_grace_s:
            with self.step("play_remaining"):
                self.summary.runner += f" + pool for {len(missing)}"
                self.summary.results.update(run_pool(self.cfg, self.source, missing, self.policy_for,
                                                     self._record_path, self.deadline, self.summary.mode))
        return self.summary.results

    def _record_path(self, game_id: str) -> Path:
        return self.out / "records" / f"{game_id}.jsonl"

    # -- the end ----------------------------------------------------------------------------

    def finish(self) -> None:
        """Close the scorecard, stop vLLM, write the outputs. Safe to call twice."""
        if self._finished:
            return
        self._finished = True
        self.serving.halt()
        self._exits.close()
        with self.step("close_scorecard"):
            if self.source is not None:
                card_id = self.summary.scorecard.get("card_id")
                card = self.source.close()
                self.summary.scorecard["closed"] = True
                self.summary.scorecard["closed_at_s"] = round(time.time() - self.t0, 1)
                if card is not None and not self.rerun:
                    self.summary.scorecard["toolkit_score"] = getattr(card, "score", None)
                log.info("scorecard %s closed", card_id)
        with self.step("stop_model"):
            if self.server is not None:
                self.serving.stop()
                self.summary.model["stopped"] = True
        if not self.rerun:
            with self.step("score"):
                if any((self.out / "records").glob("*.jsonl")):
                    doc = write_score(self.out)
                    self.summary.scorecard["score"] = doc.get("score")
            with self.step("placeholder_submission"):
                p = write_placeholder_submission(self.working / "submission.parquet")
                self.summary.submission = str(p)
        self.summary.ended_at = time.time()
        self._write_summary()
        played = sum(1 for r in self.summary.results.values() if r.get("actions", 0) > 0)
        log.info("done: %d/%d games played, %.0f s of %.0f s, model server boots: %s; errors: %s", played,
                 len(self.game_ids), self.summary.ended_at - self.t0, self.budget_s, boots_line(self.serving.boots),
                 self.summary.errors or "none")


def _s(p: Path | None) -> str | None:
    return None if p is None else str(p)

