"""Laying out what Kaggle gives the notebook, for a rehearsal: an input folder with the
competition data, our wheel dataset and the model weights; a working folder; a stand-in
`vllm` executable; and the kernel's environment (Kaggle's rerun flag plus our config,
scaled to the rehearsal's budget).

* the wheel dataset: a `duck-dataset.json` and a `duck.lock` pinning what is already
  installed here (so the notebook's offline `pip install --no-index` runs for real and has
  nothing to do) and no project wheel (the notebook then runs this checkout's installed
  package);
* the weights: a folder with a `config.json`, an empty `.safetensors` and an index naming one
  drafter tensor (so a profile with MTP keeps it), laid out like a
  Kaggle Model, for the notebook's search to find;
* vLLM: a stand-in `vllm` that serves devkit.stub.server's scripted model on the port
  `duck serve` asks for (it plays random valid actions through the agent's tool).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from duck.paths import REPO
from devkit.rehearse.faults import add_raising_game, fault_env
from devkit.rehearse.gateway import API_KEY

NOTEBOOK = REPO / "notebook.ipynb"
BROKEN_GAMES = REPO / "tests" / "fixtures" / "broken_games"
MAX_ACTIONS = 300  # per game (play.max_actions): enough to play, few enough for a 2-core box

# The stand-in `vllm`: `vllm serve MODEL --port P --served-model-name NAME ...` serves the
# scripted stub model there (its /metrics too, with vLLM 0.19's names). Knobs (environment):
# DUCK_STANDIN_DIE_AFTER_S (exit then), DUCK_STANDIN_HANG_AFTER_S (stop answering then),
# DUCK_STANDIN_FAULT_ONCE (a file: those two faults strike only the boot that finds no such
# file, and leave it: a restarted server then serves), DUCK_STANDIN_DIE_WITH_MTP_AFTER_S (exit
# then, on every boot served with MTP: a crash loop), DUCK_STANDIN_MTP_STEP_TOKENS (with MTP:
# the tokens an engine step yields, in /metrics' spec-decode counters; default 2.7),
# DUCK_STANDIN_EXIT_AT_ONCE (never come up), DUCK_STANDIN_LATENCY (answer as a loaded GPU
# would: a devkit.stub.latency spec such as "speed=20"), DUCK_STANDIN_BOOT_S (take
# this long to start listening, as vLLM loads its weights), DUCK_STANDIN_BOOT_UNTIL (a file:
# listen only once it exists, however long that takes).
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
from devkit.stub.latency import LatencyModel
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer
time.sleep(float(os.environ.get("DUCK_STANDIN_BOOT_S") or 0))
while os.environ.get("DUCK_STANDIN_BOOT_UNTIL") and not os.path.exists(os.environ["DUCK_STANDIN_BOOT_UNTIL"]):
    time.sleep(0.05)
T0 = time.monotonic()
LATENCY = os.environ.get("DUCK_STANDIN_LATENCY")
ONCE = os.environ.get("DUCK_STANDIN_FAULT_ONCE")
STRUCK = bool(ONCE) and os.path.exists(ONCE)  # a fault meant once already struck an earlier boot
if ONCE and not STRUCK:
    open(ONCE, "w").close()
HANG = 0.0 if STRUCK else float(os.environ.get("DUCK_STANDIN_HANG_AFTER_S") or 0)
MTP = "--speculative-config" in argv
CODE = {code!r}
def reply(request):
    if HANG and time.monotonic() - T0 > HANG:
        time.sleep(3600)  # stops answering: the client's time-out and the health probe notice
    return {{"content": "Trying a valid action.", "reasoning": "rehearsal", "code": CODE}}
server = StubServer(FixedModel([reply], loop=True), port=int(opt("--port", "8000")),
                    host=opt("--host", "127.0.0.1"), model_name=opt("--served-model-name", "stub"),
                    latency=LatencyModel.parse(LATENCY) if LATENCY else None)
if MTP and (os.environ.get("DUCK_STANDIN_MTP_STEP_TOKENS") or server.metrics.spec is None):  # vLLM's spec-decode counters
    server.metrics.spec = (3, float(os.environ.get("DUCK_STANDIN_MTP_STEP_TOKENS") or 2.7))
die = 0.0 if STRUCK else float(os.environ.get("DUCK_STANDIN_DIE_AFTER_S") or 0)
if MTP and os.environ.get("DUCK_STANDIN_DIE_WITH_MTP_AFTER_S"):
    die = float(os.environ["DUCK_STANDIN_DIE_WITH_MTP_AFTER_S"])
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


def copy_games(src: Path, dst: Path) -> None:
    """Copy a games folder (arc_agi does not follow directory symlinks)."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


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
    (ds / "duck.lock").write_text(installed_lock(REPO / "kaggle-dataset" / "duck.lock"))
    (ds / "duck-dataset.json").write_text(json.dumps({"name": "duck-arc3-wheels", "rehearsal": True,
                                                      "locks": {"duck": "duck.lock"}}))
    model = inp / "models" / "qwen-lm" / "qwen3.6-27b-fp8" / "transformers" / "default" / "1"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "rehearsal": True}))
    (model / "model.safetensors").write_bytes(b"")
    # the index names a drafter's tensor, so that a profile with MTP is served with it (duck.llm.drafter)
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.embed_tokens.weight": "model.safetensors", "mtp.fc.weight": "model.safetensors"}}))
    exe = write_standin(bin_dir / "vllm")
    return {"input": inp, "working": working, "competition": comp, "served": served, "vllm": exe,
            "dataset": ds, "model": model}


def write_standin(path: Path) -> Path:
    """The stand-in `vllm` executable at `path` (knobs: the STANDIN comment above)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STANDIN.format(python=sys.executable, path=[str(REPO)], code=STANDIN_CODE))
    path.chmod(0o755)
    return path


def notebook_env(paths: dict[str, Path], budget_s: float, mode: str, fault: str, gateway_url: str,
                 model_port: int, n_games: int, max_actions: int = MAX_ACTIONS) -> dict[str, str]:
    """The kernel's environment: Kaggle's (rerun flag) plus our config (`DUCK_SECTION__FIELD`
    variables), scaled to the budget."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("DUCK_") or k in ("KAGGLE_IS_COMPETITION_RERUN", "OPERATION_MODE"))}
    if mode == "rerun":
        env["KAGGLE_IS_COMPETITION_RERUN"] = "1"
    margin = max(10.0, 0.25 * budget_s)  # a stop's latency and the teardown, on a loaded CI machine
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
        "DUCK_KAGGLE__HEALTH_INTERVAL_S": "1",
        "DUCK_KAGGLE__HEALTH_TIMEOUT_S": "3",
        "DUCK_KAGGLE__HEALTH_FAILURES": "2",
        # A restart must fit: the stand-in boots in seconds; the games need a little play after it.
        "DUCK_KAGGLE__RESTART_MIN_LEFT_S": str(round(0.1 * budget_s, 1)),
        "DUCK_MODEL__SERVE__EXECUTABLE": str(paths["vllm"]),
        "DUCK_MODEL__SERVE__PORT": str(model_port),
        "DUCK_MODEL__SERVE__READY_TIMEOUT_S": str(round(min(30.0, budget_s / 3), 1)),
        "DUCK_MODEL__TIMEOUT_S": "5",
        "DUCK_MODEL__STALL_S": "3",
        "DUCK_MODEL__RETRIES": "1",
        "DUCK_MODEL__BACKOFF_S": "0.2",
        "DUCK_AGENT__FAILURES_BEFORE_FALLBACK": "2",
        "DUCK_SCHEDULER__SLOTS": str(max(1, min(n_games, 8))),  # 2 cores: at most 8 kernels at once
        # The scheduler's thresholds are in generated tokens and actions, not seconds: a short
        # rehearsal needs no scaled copy of them.
        "DUCK_PLAY__MAX_ACTIONS": str(max_actions),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(fault_env(fault, budget_s, paths["working"].parent / "standin-fault-struck"))
    return env
