"""A local rehearsal of a Kaggle run: the real notebook, end to end, on CPU.

`duck rehearse --games DIR --budget-seconds N` lays out what Kaggle gives the notebook
(an input folder with the competition data, our wheel dataset and the model weights; a
working folder; the rerun's environment) and executes `notebook.ipynb` with nbclient in a
fresh kernel. Nothing in our code is faked; what stands in for Kaggle is:

* the gateway: the official arc_agi REST app in competition mode on 127.0.0.1 over DIR
  (as duck.gateway serves it, plus the close hook Kaggle's gateway writes its submission
  from, kept as JSON), with `KAGGLE_IS_COMPETITION_RERUN` set;
* vLLM: a stand-in `vllm` executable that serves duck.stub_server's scripted model on the
  port `duck serve` asks for (it plays random valid actions through the agent's tool);
* the wheel dataset: a `duck-dataset.json` and a `duck.lock` pinning what is already
  installed here (so the notebook's offline `pip install --no-index` runs for real and has
  nothing to do), and `src/` linking this repository's packages;
* the weights: a folder with a `config.json` and an empty `.safetensors`, laid out like a
  Kaggle Model, for the notebook's search to find.

Fault variants (`--fault`): `model-dies` (the stand-in exits mid-run), `model-hangs` (it
stops answering), `no-model` (it never comes up), `game-raises` (one game cannot be
created, another raises mid-play), `gateway-slow` (the gateway comes up late and answers
slowly). `--mode interactive` rehearses a Save & Run All instead (public games offline,
placeholder submission). `--fault all` runs every variant and both modes.

Checks: the notebook ran without a cell error; notebook.ipynb is in sync with notebook.py;
every game the gateway lists was played (a record with actions; a broken game recorded
with its error); the scorecard was closed (the gateway shows it); the notebook ended
inside the budget; the outputs are where Kaggle expects them; vLLM was stopped; and each
fault's own effect (the model marked down and games going on with the explorer, ...).
Exit status 0 only when every check holds. A JSON report is printed and written to
OUT/rehearsal.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebook.ipynb"
BROKEN_GAMES = ROOT / "tests" / "fixtures" / "broken_games"
FAULTS = ("none", "model-dies", "model-hangs", "no-model", "game-raises", "gateway-slow")
API_KEY = "test-key-123"

# The stand-in `vllm`: `vllm serve MODEL --port P --served-model-name NAME ...` serves the
# scripted stub model there. Knobs (environment): DUCK_STANDIN_DIE_AFTER_S (exit then),
# DUCK_STANDIN_HANG_AFTER_S (stop answering then), DUCK_STANDIN_EXIT_AT_ONCE (never come up).
STANDIN = '''#!{python}
"""Stand-in for `vllm serve` (duck rehearse): the scripted stub server on vLLM's port."""
import json, os, sys, threading, time
sys.path[:0] = {path!r}
argv = sys.argv[1:]
def opt(name, default):
    return argv[argv.index(name) + 1] if name in argv else default
if os.environ.get("DUCK_STANDIN_EXIT_AT_ONCE"):
    print("stand-in vllm: failing to start, as told", flush=True)
    sys.exit(3)
from duck.stub_server import FixedModel, StubServer
T0 = time.monotonic()
HANG = float(os.environ.get("DUCK_STANDIN_HANG_AFTER_S") or 0)
CODE = {code!r}
def reply(request):
    if HANG and time.monotonic() - T0 > HANG:
        time.sleep(3600)  # stops answering: the client's time-out and the health probe notice
    return {{"content": "Trying a valid action.", "reasoning": "rehearsal", "code": CODE}}
server = StubServer(FixedModel([reply], loop=True), port=int(opt("--port", "8000")),
                    host=opt("--host", "127.0.0.1"), model_name=opt("--served-model-name", "stub"))
die = float(os.environ.get("DUCK_STANDIN_DIE_AFTER_S") or 0)
if die:
    threading.Timer(die, lambda: (print("stand-in vllm: dying, as told", flush=True), os._exit(17))).start()
print("stand-in vllm serving", opt("--served-model-name", "stub"), "on", server.url, "argv:", argv, flush=True)
server.httpd.serve_forever()
'''

# What the scripted model plays: one random valid action per turn, through the agent's tool.
STANDIN_CODE = """import random
names = [str(a) for a in valid_actions if str(a).upper() != 'RESET'] or ['UP']
a = random.choice(names)
action({'action': 'MOUSE', 'row': random.randrange(64), 'col': random.randrange(64)} if a.upper().startswith('MOUSE') else a)"""

# A game that raises mid-play: zs01 with its step() failing after a few frames.
RAISING_GAME = '''
class Zr01(_Zs01Base):
    """zr01: zs01 whose step() raises after 12 frames (generated by duck rehearse)."""

    def __init__(self, seed: int = 0) -> None:
        self._frames = 0
        super().__init__(seed)

    def step(self) -> None:
        self._frames += 1
        if self._frames > 12:
            raise RuntimeError("zr01 raises mid-play on purpose (duck rehearse --fault game-raises)")
        super().step()
'''


def serve_gateway(games_dir: str, port: int, closed_path: str) -> None:
    """duck.gateway's app (arc_agi's REST app, competition mode, 127.0.0.1) plus the hook
    Kaggle's gateway has: when the scorecard is closed, what it holds is written out
    (`closed_path`, JSON), so the rehearsal sees the gateway's own count of every game."""
    from arc_agi import Arcade, OperationMode
    from arc_agi.server import create_app

    def on_close(card: Any) -> None:
        Path(closed_path).write_text(card.model_dump_json())

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    arcade = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=games_dir,
                    logger=logging.getLogger("arc_agi"))
    app, _ = create_app(arcade, competition_mode=True, on_scorecard_close=on_close)
    app.run(host="127.0.0.1", port=port, threaded=True)


class Gateway:
    """`serve_gateway` as a child process, ready when /api/healthcheck answers."""

    def __init__(self, games_dir: Path, work: Path) -> None:
        self.games_dir, self.port = str(games_dir), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed_path = work / "gateway_closed_scorecard.json"
        self.log_path = work / "gateway.log"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Gateway":
        env = {k: v for k, v in os.environ.items() if k != "OPERATION_MODE"}
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "duck.rehearse", "gateway", self.games_dir,
                                      str(self.port), str(self.closed_path)], stdout=out, stderr=out, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}; see {self.log_path}")
            if _get(f"{self.url}/api/healthcheck", 1)[0] == 200:
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the gateway did not come up in 30 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def closed_card(self) -> dict[str, Any] | None:
        return json.loads(self.closed_path.read_text()) if self.closed_path.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlowProxy:
    """A gateway that comes up late and answers slowly: listens after `start_delay_s`, then
    forwards each request to `target` after `delay_s`."""

    def __init__(self, target: str, delay_s: float, start_delay_s: float) -> None:
        self.target = target.split("//", 1)[1].rstrip("/")
        self.delay_s, self.start_delay_s = delay_s, start_delay_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None
        self.requests = 0
        self.listening_at: float | None = None  # wall clock

    def __enter__(self) -> "SlowProxy":
        self._timer = threading.Timer(self.start_delay_s, self._serve)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _serve(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _forward(self) -> None:  # noqa: D401
                proxy.requests += 1
                time.sleep(proxy.delay_s)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                host, port = proxy.target.split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.listening_at = time.time()
        self.httpd.serve_forever()

    def __exit__(self, *exc: object) -> None:
        if self._timer:
            self._timer.cancel()
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()


# ---------------------------------------------------------------------------------------
# Laying out Kaggle

def copy_games(src: Path, dst: Path) -> None:
    """Copy a games folder (arc_agi does not follow directory symlinks)."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


def add_raising_game(games: Path) -> None:
    """zr01: a copy of the bundled zs01 whose step() raises mid-play."""
    base = ROOT / "tests" / "games" / "zs01" / "00000001"
    d = games / "zr01" / "00000001"
    d.mkdir(parents=True, exist_ok=True)
    src = (base / "zs01.py").read_text().replace("class Zs01(", "class _Zs01Base(").replace(
        'game_id="zs01"', 'game_id="zr01"')
    (d / "zr01.py").write_text(src + RAISING_GAME)
    meta = json.loads((base / "metadata.json").read_text())
    meta.update(game_id="zr01-00000001", title="ZR01 raises mid-play", local_dir=str(d))
    (d / "metadata.json").write_text(json.dumps(meta, indent=2))


def installed_lock(names_from: Path) -> str:
    """The real duck.lock's names, pinned to what is installed here: the notebook's
    `pip install --no-index` then resolves offline and finds everything satisfied."""
    lines = []
    for line in names_from.read_text().splitlines():
        name = line.split("==")[0].strip()
        if not name or name.startswith("#"):
            continue
        try:
            lines.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            continue
    return "\n".join(lines) + "\n"


def layout(work: Path, games: Path, mode: str, fault: str) -> dict[str, Path]:
    """The input/working folders and the stand-in; returns the paths that matter."""
    inp, working, bin_dir = work / "input", work / "working", work / "bin"
    comp = inp / "competitions" / "arc-prize-2026-arc-agi-3"
    served = work / "gateway_games"  # what the (rerun) gateway serves
    for d in (working, bin_dir):
        d.mkdir(parents=True, exist_ok=True)
    copy_games(games, comp / "environment_files")
    copy_games(games, served)
    if fault == "game-raises":
        for target in (served, comp / "environment_files"):
            copy_games(BROKEN_GAMES, target)
            add_raising_game(target)
    ds = inp / "datasets" / "rehearsal" / "duck-arc3-wheels"
    (ds / "wheels").mkdir(parents=True, exist_ok=True)
    (ds / "src").mkdir(exist_ok=True)
    for name in ("duck", "scheduler", "prompts"):
        if (ROOT / name).is_dir() and not (ds / "src" / name).exists():
            (ds / "src" / name).symlink_to(ROOT / name, target_is_directory=True)
    (ds / "duck.lock").write_text(installed_lock(ROOT / "kaggle-dataset" / "duck.lock"))
    (ds / "duck-dataset.json").write_text(json.dumps({"name": "duck-arc3-wheels", "rehearsal": True,
                                                      "locks": {"duck": "duck.lock"}, "source": "src"}))
    model = inp / "models" / "qwen-lm" / "qwen3.6-27b-fp8" / "transformers" / "default" / "1"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "rehearsal": True}))
    (model / "model.safetensors").write_bytes(b"")
    exe = bin_dir / "vllm"
    exe.write_text(STANDIN.format(python=sys.executable, path=[str(ROOT)], code=STANDIN_CODE))
    exe.chmod(0o755)
    return {"input": inp, "working": working, "competition": comp, "served": served, "vllm": exe,
            "dataset": ds, "model": model}


def notebook_env(paths: dict[str, Path], budget_s: float, mode: str, fault: str, gateway_url: str,
                 model_port: int, n_games: int, max_actions: int = 300) -> dict[str, str]:
    """The kernel's environment: Kaggle's (rerun flag) plus our config, scaled to the budget."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("DUCK_") or k in ("KAGGLE_IS_COMPETITION_RERUN", "OPERATION_MODE"))}
    if mode == "rerun":
        env["KAGGLE_IS_COMPETITION_RERUN"] = "1"
    margin = max(10.0, 0.25 * budget_s)  # teardown, and a loaded CI machine
    env.update({
        "DUCK_KAGGLE__INPUT_DIR": str(paths["input"]),
        "DUCK_KAGGLE__WORKING_DIR": str(paths["working"]),
        "DUCK_KAGGLE__VLLM_ENV_DIR": str(paths["working"].parent / "vllm-env"),
        "DUCK_KAGGLE__GATEWAY_URL": gateway_url,
        "DUCK_KAGGLE__API_KEY": API_KEY,
        "DUCK_KAGGLE__GATEWAY_WAIT_S": str(round(budget_s / 2)),
        "DUCK_KAGGLE__BUDGET_S": str(budget_s),
        "DUCK_KAGGLE__INTERACTIVE_BUDGET_S": str(budget_s),
        "DUCK_KAGGLE__MARGIN_S": str(round(margin, 1)),
        "DUCK_KAGGLE__STOP_GRACE_S": "4",
        "DUCK_KAGGLE__HEALTH_INTERVAL_S": "1",
        "DUCK_KAGGLE__HEALTH_TIMEOUT_S": "3",
        "DUCK_KAGGLE__HEALTH_FAILURES": "2",
        "DUCK_KAGGLE__MODEL_RESTARTS": "0",
        "DUCK_MODEL__SERVE__EXECUTABLE": str(paths["vllm"]),
        "DUCK_MODEL__SERVE__PORT": str(model_port),
        "DUCK_MODEL__SERVE__READY_TIMEOUT_S": str(round(min(30.0, budget_s / 3), 1)),
        "DUCK_MODEL__TIMEOUT_S": "5",
        "DUCK_MODEL__STALL_S": "3",
        "DUCK_MODEL__RETRIES": "1",
        "DUCK_MODEL__BACKOFF_S": "0.2",
        "DUCK_AGENT__FAILURES_BEFORE_FALLBACK": "2",
        "DUCK_SCHEDULER__SLOTS": str(max(1, min(n_games, 8))),  # 2 cores: at most 8 kernels at once
        "DUCK_SCHEDULER__BUDGET_S": str(budget_s),
        # The adaptive policy's thresholds are for 9 hours; a rehearsal's are scaled down.
        "DUCK_KAGGLE__SCHEDULER_OVERRIDES": json.dumps({"margin_s": 2.0, "stall_s": round(budget_s / 4, 1),
                                                        "min_play_s": round(budget_s / 4, 1)}),
        "DUCK_PLAY__MAX_ACTIONS": str(max_actions),
        "PYTHONUNBUFFERED": "1",
    })
    if fault == "model-dies":
        env["DUCK_STANDIN_DIE_AFTER_S"] = str(round(max(3.0, 0.15 * budget_s), 1))
    elif fault == "model-hangs":
        env["DUCK_STANDIN_HANG_AFTER_S"] = str(round(max(3.0, 0.15 * budget_s), 1))
    elif fault == "no-model":
        env["DUCK_STANDIN_EXIT_AT_ONCE"] = "1"
    return env


# ---------------------------------------------------------------------------------------
# Running the notebook

def execute_notebook(nb_path: Path, env: dict[str, str], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """Run every cell in a fresh python3 kernel (nbclient); keep the executed notebook."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    nb = nbformat.read(str(nb_path), as_version=4)
    client = NotebookClient(nb, timeout=int(max(10, timeout_s)), kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}, allow_errors=False)
    t0 = time.monotonic()
    error = None
    try:
        client.execute(env=env, cwd=str(cwd))
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        error = f"{type(e).__name__}: {str(e)[-1500:]}"
    seconds = time.monotonic() - t0
    out = cwd / "executed.ipynb"
    nbformat.write(nb, str(out))
    return {"seconds": round(seconds, 1), "error": error, "executed": str(out)}


def _get(url: str, timeout: float = 10.0) -> tuple[int, Any]:
    """(HTTP status, JSON body or text); status 0 when nothing answered."""
    req = urllib.request.Request(url, headers={"X-API-Key": API_KEY})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)
    try:
        return status, json.loads(data or b"null")
    except ValueError:
        return status, data.decode(errors="replace")


def _port_open(url: str) -> bool:
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


# ---------------------------------------------------------------------------------------
# Checks

@dataclass
class Report:
    mode: str
    fault: str
    budget_s: float
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: Any = "") -> None:
        self.checks[name] = {"ok": bool(ok), "detail": detail}

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks.values())


def _records(working: Path) -> dict[str, Any]:
    from duck.record import read_record
    out = {}
    for p in sorted((working / "duck" / "records").glob("*.jsonl")):
        try:
            r = read_record(p)
            out[r.game_id] = r
        except Exception as e:  # a torn record is a finding, not a crash
            out[p.stem] = e
    return out


def _handover(event: dict[str, Any]) -> bool:
    """A game handed from the model to the explorer: by the notebook's fallback policy, or
    by the agent itself when its requests keep failing (whichever notices first)."""
    return event.get("kind") == "fallback" or "takes over" in str(event.get("message", ""))


def _after_handover(record: Any) -> int:
    t = next((e.get("t", 0) for e in record.events if _handover(e)), None)
    return 0 if t is None else sum(1 for a in record.actions if a.get("t", 0) >= t)


def check_run(rep: Report, paths: dict[str, Path], run: dict[str, Any], listed: list[str],
              gateway: "Gateway | None", model_url: str) -> None:
    from duck.kaggle import notebook_json
    working = paths["working"]
    rep.check("notebook_ran", run["error"] is None, run["error"] or f"{run['seconds']} s")
    rep.check("notebook_in_sync", NOTEBOOK.read_text() == notebook_json(ROOT / "notebook.py"),
              "notebook.ipynb == make notebook output")
    summary_path = working / "duck" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    rep.facts["summary"] = {k: summary.get(k) for k in ("mode", "runner", "model", "scorecard", "errors")}
    rep.facts["steps"] = {s["name"]: (s["seconds"], s["ok"]) for s in summary.get("steps", [])}
    rep.check("mode", summary.get("mode") == rep.mode, summary.get("mode"))

    # Every listed game played: a record with actions, or its failure recorded.
    records = _records(working)
    expected_broken = {g for g in listed if g.startswith(("zx01", "zr01"))} if rep.fault == "game-raises" else set()
    played, missing, errored = [], [], {}
    for g in listed:
        r = records.get(g)
        if r is None or isinstance(r, Exception):
            missing.append(g)
            continue
        errs = [e["message"] for e in r.events if e.get("kind") == "error"]
        if errs or (r.end or {}).get("reason") == "error":
            errored[g] = (errs or ["error"])[-1][:200]
        if r.actions:
            played.append(g)
        elif g not in expected_broken:
            missing.append(g)
    rep.facts["games"] = {g: {"actions": len(r.actions), "levels": (r.end or {}).get("levels"),
                              "end": (r.end or {}).get("reason"),
                              "fallbacks": [e["message"][:120] for e in r.events if _handover(e)],
                              "actions_after_handover": _after_handover(r)}
                          for g, r in records.items() if not isinstance(r, Exception)}
    rep.check("games_listed", bool(listed) and summary.get("games") == listed,
              {"gateway": listed, "notebook": summary.get("games")})
    rep.check("every_game_played", not missing, {"played": played, "missing": missing, "errors": errored})
    if rep.fault == "game-raises":
        # Each failure is visible: in the game's record, or in the run's log (a game that
        # raises mid-play is reported to the model by the kernel, and logged).
        log_text = (working / "duck" / "run.log").read_text() if (working / "duck" / "run.log").exists() else ""
        seen = {g: errored.get(g) or next((ln[:240] for ln in log_text.splitlines()
                                           if "ERROR" in ln and g in ln), None) for g in expected_broken}
        rep.check("broken_games_recorded", len(expected_broken) == 2 and all(seen.values()), seen)
        rep.check("other_games_unharmed", all(g in played for g in listed if g not in expected_broken),
                  played)

    # The scorecard: closed by the notebook, and the gateway agrees (403 while open).
    card = (summary.get("scorecard") or {}).get("card_id")
    closed = (summary.get("scorecard") or {}).get("closed") is True
    if gateway is not None:
        status = _get(f"{gateway.url}/api/scorecard/{card}")[0] if card else 0
        doc = gateway.closed_card() or {}
        envs = {}
        for e in doc.get("environments") or []:
            for r in e.get("runs") or [e]:
                envs[r.get("id") or e.get("id")] = {"actions": r.get("actions"), "levels": r.get("levels_completed")}
        rep.facts["gateway_scorecard"] = {"closed": bool(doc), "card_id": doc.get("card_id"),
                                          "after_close_status": status, "environments": envs}
        # Open, the gateway answers 403 for the card; closed, it has dropped it (404) and
        # its close hook (the one Kaggle's gateway writes the submission from) has fired.
        rep.check("scorecard_closed", closed and doc.get("card_id") == card and status == 404,
                  {"notebook": closed, "gateway_close_hook": doc.get("card_id"), "card": card,
                   "gateway_status_after": status})
        on_card = [g for g in listed if g not in expected_broken and (envs.get(g) or {}).get("actions")]
        rep.check("gateway_saw_every_game", set(on_card) == set(listed) - expected_broken,
                  {"with_actions": on_card})
    else:
        rep.check("scorecard_closed", closed, {"card": card})

    # Inside the budget: the whole notebook (kernel start included), and its own clock.
    own = (summary.get("ended_at") or 0) - (summary.get("started_at") or 0)
    rep.check("inside_budget", run["seconds"] <= rep.budget_s and 0 < own <= rep.budget_s,
              {"notebook_s": run["seconds"], "own_clock_s": round(own, 1), "budget_s": rep.budget_s})

    # Outputs where Kaggle expects them.
    sub = working / "submission.parquet"
    outputs = {"summary.json": summary_path.exists(), "run.log": (working / "duck" / "run.log").exists(),
               "records": len(records)}
    if rep.mode == "interactive":
        cols = None
        if sub.exists():
            import pyarrow.parquet as pq
            cols = pq.read_table(sub).column_names
        outputs["submission.parquet columns"] = cols
        outputs["score.json"] = (working / "duck" / "score.json").exists()
        ok = cols == ["row_id", "game_id", "end_of_game", "score"] and outputs["score.json"]
    else:
        outputs["submission.parquet (the gateway writes it; we must not)"] = sub.exists()
        ok = not sub.exists()
    ok = ok and outputs["summary.json"] and outputs["run.log"] and outputs["records"] >= len(listed)
    rep.check("outputs_in_place", ok, outputs)

    # vLLM torn down, and each fault's own effect.
    model = summary.get("model") or {}
    rep.check("model_server_stopped", not _port_open(model_url), model.get("status"))
    fallbacks = sum(len(v["fallbacks"]) for v in rep.facts["games"].values())
    if rep.fault in ("model-dies", "model-hangs"):
        down = model.get("down") or []
        rep.check("model_marked_down", bool(down), down)
        after = {g: v["actions_after_handover"] for g, v in rep.facts["games"].items()}
        rep.check("games_went_on_with_explorer", fallbacks > 0 and not missing and sum(after.values()) > 0,
                  {"handovers": fallbacks, "actions_after_handover": after})
    elif rep.fault == "no-model":
        rep.check("model_never_up", model.get("status", "").startswith("did not come up"), model.get("status"))
    elif rep.fault == "none":
        rep.check("model_was_ready", model.get("status") == "ready", model.get("status"))


def check_waited(rep: Report, paths: dict[str, Path], proxy: SlowProxy) -> None:
    """gateway-slow: the notebook asked for the games before the gateway listened, waited,
    and every request still went through the slow gateway."""
    summary = json.loads((paths["working"] / "duck" / "summary.json").read_text())
    step = next((s for s in summary.get("steps", []) if s["name"] == "open_games"), None)
    asked_at = summary["started_at"] + step["started"] if step else None
    rep.facts["gateway_proxy"] = {"start_delay_s": proxy.start_delay_s, "delay_s": proxy.delay_s,
                                  "requests": proxy.requests, "listening_at": proxy.listening_at,
                                  "notebook_asked_at": asked_at, "waited_s": step and step["seconds"]}
    rep.check("waited_for_gateway", bool(step and step["ok"] and proxy.listening_at and asked_at
                                         and asked_at < proxy.listening_at and proxy.requests > 0),
              rep.facts["gateway_proxy"])


def rehearse(games: str | Path, budget_s: float, *, mode: str = "rerun", fault: str = "none",
             out: str | Path | None = None, notebook: Path = NOTEBOOK, max_actions: int = 300) -> Report:
    """One rehearsal; the report says which checks held."""
    games = Path(games).resolve()
    rep = Report(mode, fault, budget_s)
    work = Path(out) if out else Path(tempfile.mkdtemp(prefix=f"duck-rehearse-{mode}-{fault}-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    paths = layout(work, games, mode, fault)
    model_port = free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    rep.facts["work"] = str(work)
    t0 = time.monotonic()
    if mode == "rerun":
        with Gateway(paths["served"], work) as gw:
            _, doc = _get(f"{gw.url}/api/games")
            listed = sorted(g["game_id"] for g in doc or [])
            proxy = SlowProxy(gw.url, delay_s=0.05, start_delay_s=budget_s / 4) \
                if fault == "gateway-slow" else None
            if proxy:
                proxy.__enter__()
            try:
                url = proxy.url if proxy else gw.url
                env = notebook_env(paths, budget_s, mode, fault, url, model_port, len(listed), max_actions)
                run = execute_notebook(notebook, env, work, budget_s + 60)
                check_run(rep, paths, run, listed, gw, model_url)
                if proxy:
                    check_waited(rep, paths, proxy)
            finally:
                if proxy:
                    proxy.__exit__(None, None, None)
    else:
        from duck.games import GameSource
        listed = [g.game_id for g in GameSource.offline(paths["competition"] / "environment_files").games()]
        env = notebook_env(paths, budget_s, mode, fault, "http://127.0.0.1:9", model_port, len(listed), max_actions)
        run = execute_notebook(notebook, env, work, budget_s + 60)
        check_run(rep, paths, run, listed, None, model_url)
    rep.facts["wall_s"] = round(time.monotonic() - t0, 1)
    (work / "rehearsal.json").write_text(json.dumps(_doc(rep), indent=1, default=str))
    return rep


def _doc(rep: Report) -> dict[str, Any]:
    return {"ok": rep.ok, "mode": rep.mode, "fault": rep.fault, "budget_s": rep.budget_s,
            "checks": rep.checks, "facts": rep.facts}


def variants(fault: str, mode: str) -> list[tuple[str, str]]:
    if fault == "all":
        return [("rerun", f) for f in FAULTS] + [("interactive", "none")]
    return [(mode, fault)]


def _main(args: argparse.Namespace) -> int:
    results = []
    for mode, fault in variants(args.fault, args.mode):
        out = Path(args.out, f"{mode}-{fault}") if args.out else None
        rep = rehearse(args.games, args.budget_seconds, mode=mode, fault=fault, out=out,
                       max_actions=args.max_actions)
        results.append(rep)
        doc = _doc(rep)
        if not args.verbose:
            doc["facts"] = {k: doc["facts"][k] for k in ("work", "wall_s") if k in doc["facts"]}
        print(json.dumps(doc, indent=1, default=str), flush=True)
        print(f"rehearsal {mode}/{fault}: {'PASS' if rep.ok else 'FAIL'} "
              f"({sum(c['ok'] for c in rep.checks.values())}/{len(rep.checks)} checks)", flush=True)
    return 0 if all(r.ok for r in results) else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rehearse", help="rehearse a Kaggle run: the real notebook, a local gateway, a stand-in vLLM")
    p.add_argument("--games", default=str(ROOT / "tests" / "games"), help="environments folder the gateway serves")
    p.add_argument("--budget-seconds", type=float, default=60.0, help="the notebook's whole budget")
    p.add_argument("--mode", choices=["rerun", "interactive"], default="rerun")
    p.add_argument("--fault", choices=[*FAULTS, "all"], default="none")
    p.add_argument("--out", default=None, help="keep the rehearsal folders here (default: a temp folder)")
    p.add_argument("--max-actions", type=int, default=300, help="per game (play.max_actions)")
    p.add_argument("--verbose-report", dest="verbose", action="store_true", help="print every fact, not just the checks")
    p.set_defaults(func=_main)


if __name__ == "__main__":
    if sys.argv[1:2] == ["gateway"]:  # the rehearsal's gateway child: games_dir port closed_path
        serve_gateway(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: duck rehearse ... (this module's __main__ only runs the rehearsal's gateway)")
