"""The Kaggle notebook's orchestration: everything `notebook.py` calls, in order.

    run = KaggleRun(started_at=T0)     # mode, config, paths, budget
    run.prepare_model()                # vLLM's venv from the wheel dataset, then `duck serve`
    run.open_games()                   # the gateway (rerun) or the public games (interactive)
    try:
        run.play()                     # the scheduler's runner over every listed game
    finally:
        run.finish()                   # scorecard closed, vLLM stopped, outputs written

Mode: during the competition rerun Kaggle sets `KAGGLE_IS_COMPETITION_RERUN`; the games
are then reached through the gateway (`kaggle.gateway_url`, COMPETITION mode, one
scorecard, one make() per game) and the gateway writes `submission.parquet` itself. Any
other run (Save & Run All, a draft session) is interactive: it plays the public games
offline from the competition's `environment_files/` and writes a placeholder
`submission.parquet`, which Kaggle requires for the notebook to be submittable.

Nothing here may stop the notebook: every step catches what goes wrong, logs it, keeps it
in `summary.json` and degrades. No model server (it did not come up, died, or stopped
answering): the games are played by the explorer. A game that raises is recorded with its
error and the others go on. The play ends `kaggle.margin_s` before the notebook's budget,
and whatever happened the scorecard is closed and vLLM stopped.

Outputs (under `kaggle.working_dir`, which Kaggle keeps): `submission.parquet` (interactive
only), `duck/records/<game>.jsonl`, `duck/score.json` (interactive), `duck/summary.json`,
`duck/run.log`, `duck/vllm.log`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger("duck.kaggle")

RERUN_ENV = "KAGGLE_IS_COMPETITION_RERUN"
COMPETITION = "arc-prize-2026-arc-agi-3"
DATASET_MARKER = "duck-dataset.json"
MODEL_DOWN = "model_down"  # the PlayStopped reason that hands a game to the explorer
PLACEHOLDER_COLUMNS = ("row_id", "game_id", "end_of_game", "score")


def is_rerun(env: dict[str, str] | None = None) -> bool:
    return bool((os.environ if env is None else env).get(RERUN_ENV))


# ---------------------------------------------------------------------------------------
# Finding the attached inputs

def _walk_dirs(root: Path, max_depth: int) -> Iterator[Path]:
    """Folders under `root`, breadth first, at most `max_depth` below it (symlinks kept)."""
    level = [root]
    for _ in range(max_depth + 1):
        nxt = []
        for d in level:
            yield d
            try:
                nxt += sorted(p for p in d.iterdir() if p.is_dir())
            except OSError:
                continue
        level = nxt


def find_competition_dir(input_dir: str | Path, explicit: str = "") -> Path | None:
    """The competition data: explicit, the usual mount points, or any folder with games."""
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    root = Path(input_dir)
    for cand in (root / "competitions" / COMPETITION, root / COMPETITION):
        if (cand / "environment_files").is_dir():
            return cand
    for d in _walk_dirs(root, 3):
        if (d / "environment_files").is_dir():
            return d
    return None


def find_dataset_dir(input_dir: str | Path, explicit: str = "") -> Path | None:
    """Our wheel dataset: the folder holding `duck-dataset.json`."""
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    for d in _walk_dirs(Path(input_dir), 4):
        if (d / DATASET_MARKER).is_file():
            return d
    return None


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def find_model_dir(input_dir: str | Path, name: str, explicit: str = "") -> Path | None:
    """The weights: a folder with `config.json` and safetensors; the one whose path names
    the model when there are several (a Kaggle Model mounts 6 levels deep)."""
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    found = [d for d in _walk_dirs(Path(input_dir), 7)
             if (d / "config.json").is_file() and any(d.glob("*.safetensors"))]
    want = _squash(name.split("/")[-1])
    named = [d for d in found if want and want in _squash(str(d))]
    if named:
        return named[0]
    return found[0] if len(found) == 1 else None


# ---------------------------------------------------------------------------------------
# Offline installs

def install_vllm(dataset_dir: Path, env_dir: Path, timeout_s: float = 1800.0) -> Path | None:
    """vLLM into its own venv from the wheel dataset (its numpy pin conflicts with ours).
    Returns the `vllm` executable, or None when the dataset has no vLLM."""
    lock = dataset_dir / "vllm.lock"
    if not lock.is_file():
        log.info("no vllm.lock in %s: vLLM is not installed from the dataset", dataset_dir)
        return None
    exe = env_dir / "bin" / "vllm"
    if exe.exists():
        return exe
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--no-index", "--quiet",
                    "--find-links", str(dataset_dir / "wheels"), "-r", str(lock)],
                   check=True, timeout=timeout_s)
    log.info("vLLM installed into %s in %.0f s", env_dir, time.monotonic() - t)
    return exe if exe.exists() else None


# ---------------------------------------------------------------------------------------
# The gateway

def wait_for_gateway(url: str, timeout_s: float, api_key: str = "", poll_s: float = 2.0) -> list[dict]:
    """Poll `GET {url}/api/games` until it lists games; raises TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    last: Any = None
    while True:
        try:
            req = urllib.request.Request(url.rstrip("/") + "/api/games",
                                         headers={"X-API-Key": api_key} if api_key else {})
            with urllib.request.urlopen(req, timeout=10) as r:
                games = json.loads(r.read())
            if isinstance(games, list) and games:
                return games
            last = f"an empty game list ({games!r:.80})"
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the gateway at {url} did not list games in {timeout_s:.0f} s (last: {last})")
        time.sleep(min(poll_s, max(0.05, deadline - time.monotonic())))


# ---------------------------------------------------------------------------------------
# Outputs

def write_placeholder_submission(path: Path) -> Path:
    """The one-row file an interactive run leaves so that the notebook can be submitted;
    in the rerun the gateway writes the real one."""
    row = {"row_id": ["1_0"], "game_id": ["1"], "end_of_game": [True], "score": [1]}
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table(row), path)
    except ImportError:
        import pandas as pd
        pd.DataFrame(row).to_parquet(path, index=False)
    return path


# ---------------------------------------------------------------------------------------
# Model health and the fallback policy

class ModelHealth:
    """Whether games may use the model, as a flag file: cheap to read from any thread or
    process (a game worker checks it before each action)."""

    def __init__(self, flag: Path) -> None:
        self.flag = Path(flag)

    def down(self) -> bool:
        return self.flag.exists()

    def ok(self) -> bool:
        return not self.flag.exists()

    def mark_down(self, reason: str, quiet: bool = False) -> None:
        if not self.flag.exists() and not quiet:
            log.warning("model server down: %s; games go on with the explorer", reason)
        self.flag.parent.mkdir(parents=True, exist_ok=True)
        self.flag.write_text(reason)

    def mark_up(self) -> None:
        self.flag.unlink(missing_ok=True)


class _Watched:
    """A Session seen by the model-driven policy: the next action raises
    PlayStopped(model_down) as soon as the server is marked down."""

    def __init__(self, session: Any, health: ModelHealth) -> None:
        self._session = session
        self._health = health

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def stop_reason(self) -> str | None:
        return MODEL_DOWN if self._health.down() else self._session.stop_reason()

    def step(self, action: Any, info: dict[str, Any] | None = None) -> Any:
        from duck.play import PlayStopped
        if self._health.down():
            raise PlayStopped(MODEL_DOWN)
        return self._session.step(action, info)


class FallbackPolicy:
    """The model-driven policy while the server is healthy, the explorer otherwise: a game
    whose model fails (server down, or the policy raises) goes on with the explorer from
    where it is, instead of sitting idle."""

    name = "llm"

    def __init__(self, llm: Callable[[], Any], explorer: Callable[[], Any], health: ModelHealth) -> None:
        self.llm, self.explorer, self.health = llm, explorer, health

    def play(self, session: Any) -> None:
        from duck.games import GameError
        from duck.play import PlayStopped
        if self.health.ok():
            try:
                self.llm().play(_Watched(session, self.health))
                return
            except PlayStopped as e:
                if e.reason != MODEL_DOWN:
                    raise
                session.event("fallback", "the model server is down: the explorer takes over")
            except GameError:
                raise
            except Exception as e:  # a bug or a model failure must not idle the game
                session.event("fallback", f"the model policy failed ({type(e).__name__}: {e}): "
                                          "the explorer takes over", traceback.format_exc(limit=6))
        else:
            session.event("fallback", "no model server: the explorer plays")
        if session.stop_reason() is None:
            self.explorer().play(session)


# ---------------------------------------------------------------------------------------
# The run

@dataclass
class Step:
    name: str
    started: float
    seconds: float = 0.0
    ok: bool = True
    error: str | None = None


@dataclass
class Summary:
    mode: str
    started_at: float
    budget_s: float
    deadline: float
    steps: list[Step] = field(default_factory=list)
    paths: dict[str, str | None] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    games: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    runner: str = ""
    scorecard: dict[str, Any] = field(default_factory=dict)
    submission: str | None = None
    ended_at: float | None = None
    errors: list[str] = field(default_factory=list)


class KaggleRun:
    """One notebook run. Each public method is a notebook cell's work and never raises."""

    def __init__(self, started_at: float | None = None, config: Any = None,
                 env: dict[str, str] | None = None) -> None:
        from duck.config import load_config
        self.env = dict(os.environ if env is None else env)
        self.t0 = time.time() if started_at is None else started_at
        self.config_errors: list[str] = []
        self.cfg = config or self._load_config(load_config)
        k = self.cfg.kaggle
        self.rerun = is_rerun(self.env)
        self.budget_s = k.budget_s if self.rerun else min(k.budget_s, k.interactive_budget_s)
        self.deadline = self.t0 + self.budget_s - k.margin_s  # games end by then (wall clock)
        self.working = Path(k.working_dir)
        self.out = self.working / "duck"
        self.out.mkdir(parents=True, exist_ok=True)
        self._log_to_file()
        self.summary = Summary("rerun" if self.rerun else "interactive", self.t0, self.budget_s, self.deadline)
        self.summary.errors += self.config_errors
        self.health = ModelHealth(self.out / "model_down")
        self.health.mark_down("not started", quiet=True)
        self.server: Any = None
        self.model_url: str | None = None
        self.source: Any = None
        self.game_ids: list[str] = []
        self._monitor: threading.Thread | None = None
        self._monitor_stop = threading.Event()
        self._restarts = k.model_restarts
        self._finished = False
        with self.step("locate"):
            self.competition_dir = find_competition_dir(k.input_dir, k.competition_dir)
            self.dataset_dir = find_dataset_dir(k.input_dir, k.dataset_dir)
            self.model_dir = find_model_dir(k.input_dir, self.cfg.model.name, k.model_dir)
            self.summary.paths = {"competition": _s(self.competition_dir), "dataset": _s(self.dataset_dir),
                                  "model": _s(self.model_dir), "working": str(self.working)}
        log.info("mode %s, budget %.0f s (games end %.0f s from the start), paths %s", self.summary.mode,
                 self.budget_s, self.deadline - self.t0, self.summary.paths)

    # -- bookkeeping ------------------------------------------------------------------

    def _load_config(self, load_config: Callable) -> Any:
        """The config from the environment; a variable that does not validate is dropped
        (and reported) instead of costing the submission."""
        try:
            return load_config(env=self.env)
        except Exception:
            pass
        keep = {k: v for k, v in self.env.items() if not k.startswith("DUCK_")}
        for k, v in self.env.items():
            if k.startswith("DUCK_"):
                try:
                    load_config(env={k: v})
                    keep[k] = v
                except Exception as e:
                    self.config_errors.append(f"{k} ignored: {str(e).splitlines()[0]}")
                    print(f"duck.kaggle: {k} ignored: {e}", file=sys.stderr)
        return load_config(env=keep)

    def left(self) -> float:
        """Seconds until the games must have ended."""
        return self.deadline - time.time()

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        s = Step(name, round(time.time() - self.t0, 1))
        if hasattr(self, "summary"):
            self.summary.steps.append(s)
        t = time.monotonic()
        try:
            yield s
        except Exception as e:  # a notebook cell must never fail: keep going, degraded
            s.ok, s.error = False, f"{type(e).__name__}: {e}"
            log.error("step %s failed: %s\n%s", name, s.error, traceback.format_exc(limit=8))
            if hasattr(self, "summary"):
                self.summary.errors.append(f"{name}: {s.error}")
        finally:
            s.seconds = round(time.monotonic() - t, 1)
            if hasattr(self, "summary"):
                self._write_summary()

    def _log_to_file(self) -> None:
        root = logging.getLogger()
        if not any(getattr(h, "_duck_kaggle", False) for h in root.handlers):
            fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            fh = logging.FileHandler(self.out / "run.log")
            sh = logging.StreamHandler(sys.stdout)  # the notebook's output: our steps, and trouble
            sh.addFilter(lambda r: r.name == log.name or r.levelno >= logging.WARNING)
            for h in (fh, sh):
                h.setFormatter(fmt)
                h._duck_kaggle = True  # type: ignore[attr-defined]
                root.addHandler(h)
            root.setLevel(logging.INFO)
            logging.getLogger("arc_agi").setLevel(logging.WARNING)
            logging.getLogger("httpx").setLevel(logging.WARNING)

    def _write_summary(self) -> None:
        try:
            doc = asdict(self.summary)
            (self.out / "summary.json").write_text(json.dumps(doc, indent=1, default=str))
        except Exception as e:  # informative only
            log.warning("could not write summary.json: %s", e)

    # -- the model server ----------------------------------------------------------------

    def prepare_model(self) -> bool:
        """Install vLLM from the dataset and start `duck serve`; True when it answers."""
        m = self.summary.model
        if not self.cfg.kaggle.use_model:
            m["status"] = "off (kaggle.use_model=false)"
            return False
        if self.model_dir is None:
            m["status"] = f"no weights for {self.cfg.model.name} under {self.cfg.kaggle.input_dir}: the explorer plays"
            log.warning(m["status"])
            return False
        self.cfg.model.serve.model_path = m["model_path"] = str(self.model_dir)
        with self.step("install_vllm"):
            if self.dataset_dir is not None:
                exe = install_vllm(self.dataset_dir, Path(self.cfg.kaggle.vllm_env_dir))
                if exe is not None:
                    self.cfg.model.serve.executable = str(exe)
            m["executable"] = self.cfg.model.serve.executable
        with self.step("serve") as s:
            if self._start_server():
                m["status"] = "ready"
                self._start_monitor()
                return True
            s.ok = False
        m.setdefault("status", "did not come up: the explorer plays")
        return False

    def _start_server(self) -> bool:
        """`duck serve`'s VLLMServer: ready when /v1/models lists the model and a smoke chat
        succeeds, bounded by the budget. False (server stopped) when it does not come up."""
        from duck.serve import VLLMServer
        timeout = max(1.0, min(self.cfg.model.serve.ready_timeout_s, self.left() - 60))
        self.server = VLLMServer(self.cfg.model, log_path=self.out / "vllm.log").start()
        try:
            ready_s = self.server.wait_ready(timeout)
        except Exception as e:  # ServeError: crashed, timed out, or the smoke chat failed
            self.summary.model["status"] = f"did not come up ({type(e).__name__}): the explorer plays"
            self.summary.model["error"] = str(e)[-2000:]
            log.error("vLLM did not come up: %s", e)
            self.server.stop()
            return False
        self.model_url = self.server.url
        self.health.mark_up()
        self.summary.model["url"] = self.model_url
        self.summary.model["ready_s"] = round(ready_s, 1)
        self.summary.model["ready_at_s"] = round(time.time() - self.t0, 1)
        return True

    def _start_monitor(self) -> None:
        self._monitor = threading.Thread(target=self._watch_model, name="duck-model-health", daemon=True)
        self._monitor.start()

    def _probe(self) -> bool:
        """A one-token chat: a wedged server still answers /v1/models, not this."""
        k = self.cfg.kaggle
        try:
            with urllib.request.urlopen(self.model_url.rstrip("/") + "/v1/models", timeout=10) as r:
                name = json.loads(r.read())["data"][0]["id"]
            body = json.dumps({"model": name, "max_tokens": 1, "temperature": 0,
                               "messages": [{"role": "user", "content": "ping"}]}).encode()
            req = urllib.request.Request(self.model_url.rstrip("/") + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=k.health_timeout_s) as r:
                return r.status == 200
        except Exception as e:
            log.info("model probe failed: %s", e)
            return False

    def _watch_model(self) -> None:
        k = self.cfg.kaggle
        failures = 0
        while not self._monitor_stop.wait(k.health_interval_s):
            alive = self.server is not None and self.server.alive()
            if alive and self._probe():
                failures = 0
                continue
            failures = failures + 1 if alive else k.health_failures
            if failures < k.health_failures:
                continue
            reason = "the server process ended" if not alive else f"{failures} probes failed"
            self.health.mark_down(reason)
            self.summary.model.setdefault("down", []).append(
                {"at_s": round(time.time() - self.t0, 1), "reason": reason})
            try:
                self.server.stop()  # a wedged server: fail its open requests now
            except Exception as e:
                log.warning("stopping the model server: %s", e)
            if self._restarts > 0 and self.left() > k.restart_min_left_s and not self._monitor_stop.is_set():
                self._restarts -= 1
                log.info("restarting the model server (%d restarts left)", self._restarts)
                with self.step("serve_restart"):
                    if self._start_server():
                        self.summary.model.setdefault("restarted_at_s", []).append(round(time.time() - self.t0, 1))
                        failures = 0
                        continue
            return  # down for good: the explorer plays the rest

    # -- the games -------------------------------------------------------------------------

    def open_games(self) -> list[str]:
        """The game source and the list of games to play (the rerun waits for the gateway)."""
        from duck.games import GameSource
        k = self.cfg.kaggle
        with self.step("open_games"):
            if self.rerun:
                wait_for_gateway(k.gateway_url, min(k.gateway_wait_s, max(0.0, self.left())), k.api_key)
                self.source = GameSource.competition(k.gateway_url, k.api_key)
            else:
                if self.competition_dir is None:
                    raise FileNotFoundError(f"no competition data with environment_files/ under {k.input_dir}")
                self.source = GameSource.offline(self.competition_dir / "environment_files")
            ids = [g.game_id for g in self.source.games()]
            if not self.rerun and k.interactive_games > 0:
                ids = ids[:k.interactive_games]
            self.game_ids = ids
            self.summary.games = ids
            self.summary.scorecard["card_id"] = self.source.open_scorecard(tags=["duck", self.summary.mode])
            log.info("%d games to play: %s", len(ids), " ".join(ids))
        return self.game_ids

    def policy_for(self, game_id: str) -> Any:
        """The policy a game starts with: model-driven while the server is up, else the explorer."""
        from duck.policies import make_policy
        seed = self.cfg.play.seed
        if self.model_url is None:
            return make_policy("explorer", seed)
        return FallbackPolicy(lambda: make_policy("llm", seed, model_url=self.model_url, config=self.cfg),
                              lambda: make_policy("explorer", seed), self.health)

    def play(self) -> dict[str, dict[str, Any]]:
        """Every listed game through the scheduler's runner, ending by the deadline."""
        if self.source is None or not self.game_ids:
            log.error("no games to play")
            return {}
        with self.step("play"):
            self.summary.runner = "scheduler.runner"
            results = self._run_scheduler()
            self.summary.results.update(results)
        # Games the runner never started (no record: play_game writes one first thing) are
        # played here, so that no game is left at 0 for a bug in one component. A started
        # game is never made twice (the gateway allows one make() per game).
        missing = [g for g in self.game_ids if g not in self.summary.results and not self._record_path(g).exists()]
        if missing and self.left() > self.cfg.kaggle.stop_grace_s:
            with self.step("play_remaining"):
                self.summary.runner += f" + pool for {len(missing)}"
                self.summary.results.update(self._run_pool(missing))
        return self.summary.results

    def _record_path(self, game_id: str) -> Path:
        return self.out / "records" / f"{game_id}.jsonl"

    def _run_scheduler(self) -> dict[str, dict[str, Any]]:
        """scheduler.runner.Runner under the configured policy, in a thread of its own (a
        notebook cell already runs inside an event loop, so asyncio.run cannot be called
        here), joined by the deadline plus the stop grace: a hung game cannot hold up the
        scorecard's closing."""
        import asyncio
        from scheduler.policy import make_policy as make_schedule
        from scheduler.runner import Runner
        budget = max(0.0, min(self.cfg.scheduler.budget_s, self.left()))
        policy = make_schedule(self.cfg.scheduler.policy, **self.cfg.kaggle.scheduler_overrides)
        runner = Runner(policy, slots=max(1, self.cfg.scheduler.slots), budget_s=budget,
                        source=_OneMakeAtATime(self.source), play_policy=self.policy_for,
                        max_actions=self.cfg.play.max_actions, records_dir=self.out / "records")
        self.summary.runner = f"scheduler.runner ({policy.name}, {runner.slots} slots, {budget:.0f} s)"
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["result"] = asyncio.run(runner.run(self.game_ids))
            except BaseException as e:  # reported below; the pool plays what is left
                box["error"] = e
                box["trace"] = traceback.format_exc(limit=8)

        t = threading.Thread(target=target, name="duck-runner", daemon=True)
        t.start()
        t.join(max(0.0, self.left()) + self.cfg.kaggle.stop_grace_s)
        if t.is_alive():
            raise TimeoutError("the runner did not return by the deadline plus the stop grace; "
                               "its games are left to end on their own deadlines")
        if "error" in box:
            log.error("the runner failed: %s", box["trace"])
            raise box["error"]
        out = {}
        for g, r in box["result"].summary()["games"].items():
            if r.get("started_at") is not None:
                out[g] = {k: r[k] for k in ("levels", "actions", "end_reason", "error") if r.get(k) is not None}
                out[g]["score"] = round(r.get("score") or 0.0, 4)
        return out

    def _run_pool(self, game_ids: list[str]) -> dict[str, dict[str, Any]]:
        """A plain runner: `scheduler.slots` games at a time, each with an equal share of
        what is left (the Duck's split), all stopped at the deadline."""
        import math
        from concurrent.futures import ThreadPoolExecutor
        from duck.play import play_game
        slots = max(1, min(self.cfg.scheduler.slots, len(game_ids)))
        left = max(0.0, self.left())
        waves = math.ceil(len(game_ids) / slots)
        allot = min(left * slots / max(1, len(game_ids)), left / max(1, waves))
        stop = threading.Event()
        end_mono = time.monotonic() + left
        results: dict[str, dict[str, Any]] = {}
        source = _OneMakeAtATime(self.source)

        def one(game_id: str) -> None:
            if stop.is_set() or time.monotonic() >= end_mono:
                results[game_id] = {"end_reason": "not_started", "levels": 0, "actions": 0}
                return
            deadline = min(time.monotonic() + allot, end_mono)
            r = play_game(source, game_id, self.policy_for(game_id), max_actions=self.cfg.play.max_actions,
                          record_path=self._record_path(game_id), stop=stop, deadline=deadline,
                          seed=self.cfg.play.seed, config={"runner": "pool", "mode": self.summary.mode})
            results[game_id] = _result_dict(r)
            log.info("%s: %s", game_id, results[game_id])

        pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="duck-game")
        futures = [pool.submit(one, g) for g in game_ids]
        grace = self.cfg.kaggle.stop_grace_s
        for f in futures:
            try:
                f.result(timeout=max(0.0, end_mono - time.monotonic()) + grace)
            except Exception as e:  # a hung worker or a bug: stop the rest, keep what we have
                log.error("a game worker did not finish: %r", e)
                stop.set()
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        for g in game_ids:
            results.setdefault(g, {"end_reason": "unfinished", "levels": 0, "actions": 0})
        return results

    # -- the end ----------------------------------------------------------------------------

    def finish(self) -> None:
        """Close the scorecard, stop vLLM, write the outputs. Safe to call twice."""
        if self._finished:
            return
        self._finished = True
        self._monitor_stop.set()
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
                self.server.stop()
                self.summary.model["stopped"] = True
        if not self.rerun:
            with self.step("score"):
                if any((self.out / "records").glob("*.jsonl")):
                    from duck.run import write_score
                    doc = write_score(self.out)
                    self.summary.scorecard["score"] = doc.get("score")
            with self.step("placeholder_submission"):
                p = write_placeholder_submission(self.working / "submission.parquet")
                self.summary.submission = str(p)
        self.summary.ended_at = time.time()
        self._write_summary()
        played = sum(1 for r in self.summary.results.values() if r.get("actions", 0) > 0)
        log.info("done: %d/%d games played, %.0f s of %.0f s, errors: %s", played, len(self.game_ids),
                 self.summary.ended_at - self.t0, self.budget_s, self.summary.errors or "none")


class _OneMakeAtATime:
    """A game source whose make() runs one at a time (the toolkit's is not meant for threads)."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def make(self, game_id: str) -> Any:
        with self._lock:
            return self._source.make(game_id)


def _result_dict(r: Any) -> dict[str, Any]:
    return {"levels": r.levels, "actions": r.actions, "score": round(r.score, 4),
            "end_reason": r.end_reason, "state": r.state, **({"error": r.error} if r.error else {})}


def _s(p: Path | None) -> str | None:
    return None if p is None else str(p)


# ---------------------------------------------------------------------------------------
# notebook.ipynb from notebook.py (`make notebook`)

ROOT = Path(__file__).resolve().parent.parent


def notebook_json(script: str | Path = ROOT / "notebook.py") -> str:
    """The .ipynb text of the jupytext percent script, byte-stable: cell ids are numbered
    (jupytext draws random ones), so a regenerated notebook differs only when the script does."""
    saved = sys.path[:]
    # jupytext tries `import notebook` (the Jupyter package); from the repository root
    # that would find our notebook.py instead.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    try:
        import jupytext
        import nbformat
    finally:
        sys.path[:] = saved
    nb = jupytext.read(str(script))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
        if cell.cell_type == "code":
            cell["execution_count"], cell["outputs"] = None, []
    return nbformat.writes(nb) + "\n"


def _notebook_main(argv: list[str]) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m duck.kaggle notebook",
                                description="write notebook.ipynb from notebook.py (or --check they agree)")
    p.add_argument("--script", default=str(ROOT / "notebook.py"))
    p.add_argument("--out", default=str(ROOT / "notebook.ipynb"))
    p.add_argument("--check", action="store_true", help="exit 1 when the .ipynb is out of date")
    a = p.parse_args(argv)
    text = notebook_json(a.script)
    out = Path(a.out)
    if a.check:
        same = out.exists() and out.read_text() == text
        print(f"{out}: {'in sync' if same else 'OUT OF DATE: run make notebook'}")
        return 0 if same else 1
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["notebook"]:
        sys.exit(_notebook_main(sys.argv[2:]))
    sys.exit("usage: python -m duck.kaggle notebook [--check]")
