"""A local rehearsal of a Kaggle run: the real notebook, end to end, on CPU.

`duck rehearse --games DIR --budget-seconds N` lays out what Kaggle gives the notebook (an input
folder with the competition data, our wheel dataset and the model weights; a working folder; the
rerun's environment) and executes `notebook.ipynb` with nbclient in a fresh kernel. The rule:
nothing in our code is faked; only Kaggle is stood in for (the gateway: the official arc_agi app
in competition mode; vLLM: a stand-in executable serving the stub's scripted model; a wheel
dataset pinning what is installed here; a model folder with empty weights). `--policy
FILE.py:Class` packs and plays your own policy; `--fault` adds a fault variant and `--mode
interactive` rehearses a Save & Run All; `--fault all` runs every variant and both modes.

Exit status 0 only when every check holds (the notebook ran, every listed game played, the
scorecard closed, inside the budget, the outputs in place, vLLM stopped, each fault's own
effect); a JSON report is printed and written to OUT/rehearsal.json. What stands in, each fault
and each check: docs/workbench.md, "The rehearsal". The pieces: devkit.rehearse.layout,
devkit.rehearse.gateway, devkit.rehearse.faults and devkit.rehearse.checks.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from duck.game.gateway import free_port
from duck.game.source import GameSource
from duck.kaggle.inputs import DATASET_MARKER, pack_policy
from duck.paths import BUNDLED_GAMES
from devkit.rehearse.checks import Report, check_run, check_waited
from devkit.rehearse.faults import FAULTS, SlowProxy, variants
from devkit.rehearse.gateway import Gateway, http_get
from devkit.rehearse.layout import MAX_ACTIONS, NOTEBOOK, layout, notebook_env


log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# Running the notebook

def execute_notebook(nb_path: Path, env: dict[str, str], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """Run every cell in a fresh python3 kernel (nbclient); keep the executed notebook."""
    # Here, not at the top: nbclient comes with the test extra only (the CLI must load without it).
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


def rehearse(games: str | Path, budget_s: float, *, mode: str = "rerun", fault: str = "none",
             out: str | Path | None = None, notebook: Path = NOTEBOOK, max_actions: int = MAX_ACTIONS,
             policy: str | None = None, helpers: str | None = None) -> Report:
    """One rehearsal; the report says which checks held. `policy` (`FILE.py:Class`, with a
    folder of `helpers`): packed into the wheel dataset as kaggle-dataset/build.py packs it;
    the notebook must play every game with it."""
    games = Path(games).resolve()
    rep = Report(mode, fault, budget_s)
    # absolute: the notebook's kernel runs in another folder, where a relative path means nothing
    work = Path(out).resolve() if out else Path(tempfile.mkdtemp(prefix=f"duck-rehearse-{mode}-{fault}-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    paths = layout(work, games, mode, fault)
    name = pack(paths["dataset"], policy, helpers) if policy else None
    model_port = free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    rep.facts["work"] = str(work)
    t0 = time.monotonic()
    if mode == "rerun":
        with Gateway(paths["served"], work) as gw:
            _, doc = http_get(f"{gw.url}/api/games")
            listed = sorted(g["game_id"] for g in doc or [])
            proxy = SlowProxy(gw.url, delay_s=0.05, start_delay_s=budget_s / 4) \
                if fault == "gateway-slow" else None
            if proxy:
                proxy.__enter__()
            try:
                url = proxy.url if proxy else gw.url
                env = notebook_env(paths, budget_s, mode, fault, url, model_port, len(listed), max_actions)
                run = execute_notebook(notebook, env, work, budget_s + 60)
                check_run(rep, paths, run, listed, gw, model_url, name)
                if proxy:
                    check_waited(rep, paths, proxy)
            finally:
                if proxy:
                    proxy.__exit__(None, None, None)
    else:
        listed = GameSource.offline(paths["competition"] / "environment_files").game_ids()
        env = notebook_env(paths, budget_s, mode, fault, "http://127.0.0.1:9", model_port, len(listed), max_actions)
        run = execute_notebook(notebook, env, work, budget_s + 60)
        check_run(rep, paths, run, listed, None, model_url, name)
    rep.facts["wall_s"] = round(time.monotonic() - t0, 1)
    (work / "rehearsal.json").write_text(json.dumps(_doc(rep), indent=1, default=str))
    return rep


def pack(dataset: Path, policy: str, helpers: str | None) -> str:
    """The user's policy into the rehearsal's wheel dataset (duck.kaggle.inputs.pack_policy, as
    the build does); returns the name its records will carry."""
    from duck.policies import load_policy_file
    file, _, cls_name = policy.rpartition(":")
    cls = load_policy_file(f"{Path(file).resolve()}:{cls_name}")  # (PolicyError: one line, before anything runs)
    marker = dataset / DATASET_MARKER
    doc = json.loads(marker.read_text())
    doc["policy"] = pack_policy(policy, dataset, helpers)
    marker.write_text(json.dumps(doc))
    return getattr(cls, "name", "") or f"{Path(file).stem}:{cls_name}"


def _doc(rep: Report) -> dict[str, Any]:
    return {"ok": rep.ok, "mode": rep.mode, "fault": rep.fault, "budget_s": rep.budget_s,
            "checks": rep.checks, "facts": rep.facts}


def _needs_test_tools() -> None:
    """The notebook runs under nbclient and ipykernel, which come with the test tools only
    (`make demo` installs without them): one line saying how to get them, before anything."""
    import importlib.util
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError as e:
        missing = e.name or str(e)
    else:
        missing = None if importlib.util.find_spec("ipykernel") else "ipykernel"
    if missing:
        raise SystemExit(f"duck rehearse runs the notebook with nbclient and ipykernel, which come with the test "
                         f"tools ({missing} is not installed): bash scripts/setup.sh --test")


def _main(args: argparse.Namespace) -> int:
    _needs_test_tools()
    results = []
    for mode, fault in variants(args.fault, args.mode):
        out = Path(args.out, f"{mode}-{fault}") if args.out else None
        rep = rehearse(args.games, args.budget_seconds, mode=mode, fault=fault, out=out,
                       max_actions=args.max_actions, policy=args.policy, helpers=args.policy_helpers)
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
    p.add_argument("--games", default=str(BUNDLED_GAMES), help="environments folder the gateway serves")
    p.add_argument("--budget-seconds", type=float, default=60.0, help="the notebook's whole budget")
    p.add_argument("--mode", choices=["rerun", "interactive"], default="rerun",
                   help="rerun: the competition rerun against the gateway; interactive: a Save & Run All")
    p.add_argument("--fault", choices=[*FAULTS, "all"], default="none",
                   help="a fault to inject (all: each in turn, and an interactive run)")
    p.add_argument("--out", default=None, help="keep the rehearsal folders here (default: a temp folder)")
    p.add_argument("--max-actions", type=int, default=MAX_ACTIONS, help="per game (play.max_actions)")
    p.add_argument("--verbose-report", dest="verbose", action="store_true", help="print every fact, not just the checks")
    p.add_argument("--policy", default=None, metavar="FILE.py:CLASS",
                   help="your own policy, packed into the wheel dataset as kaggle-dataset/build.py --policy packs it: "
                        "the notebook must play every game with it")
    p.add_argument("--policy-helpers", default=None, metavar="DIR", help="a folder the policy imports, packed beside it")
    p.set_defaults(func=_main)
