"""Playing benchmark jobs in subprocesses, one (arm, seed, game) per process.

An arm is a copy of the code: "current" is the checkout this module runs from; a baseline
is any git ref, checked out with `git worktree add --detach` into a temporary folder (old
code stays out of the tree) and removed afterwards. Each job runs
`python -c DRIVER` with PYTHONPATH = the arm's root, so the arm's own `duck` package is
imported (PYTHONPATH comes before the editable install), and plays one game with the
arm's `play_folder` (the flat layout's `duck.run` or the package layout's `duck.play.run`).

Why a process per job: a game that raises or hangs inside the engine (some community
games do) costs only its own job; a wall-clock cap (`game_seconds`) kills the job and its
record, flushed line by line, still holds every action up to the kill; and both arms pay
the same start-up cost. Jobs are submitted in the order given (the caller interleaves the
arms game by game) to a pool of `workers` threads, each waiting on one subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) holding duck/

DRIVER = """
import json, logging, sys
a = json.loads(sys.argv[1])
logging.basicConfig(level=logging.WARNING)
try:
    from duck.run import play_folder
except ImportError:
    from duck.play.run import play_folder
play_folder(a["games"], a["out"], policy="explorer", seed=a["seed"],
            max_actions=a["max_actions"], workers=1, games=[a["game"]],
            options=a["options"], overwrite=True)
"""


@dataclass
class Job:
    arm: str
    seed: int
    game: str  # game id, e.g. "ar25-0c556536"
    games_dir: Path  # a folder holding this game (its own stem folder when there is one)
    out: Path  # this job's run folder
    root: Path  # the arm's code
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def record(self) -> Path:
        return self.out / "records" / f"{self.game}.jsonl"


@dataclass
class JobResult:
    job: Job
    seconds: float
    timeout: bool
    returncode: int | None
    stderr: str


def game_dirs(games: Path) -> dict[str, Path]:
    """game id -> the smallest folder that holds it (its stem folder, e.g. DIR/ar25, when
    only one game lives there), so a job does not scan the whole collection."""
    metas = sorted(games.resolve().rglob("metadata.json"))
    ids: dict[str, Path] = {}
    per_stem: dict[Path, int] = {}
    for m in metas:
        try:
            gid = json.loads(m.read_text())["game_id"]
        except (OSError, ValueError, KeyError):
            continue
        rel = m.relative_to(games.resolve())
        stem = games.resolve() / rel.parts[0] if len(rel.parts) > 2 else games.resolve()
        per_stem[stem] = per_stem.get(stem, 0) + 1
        ids[gid] = stem
    return {g: (d if per_stem[d] == 1 else games.resolve()) for g, d in sorted(ids.items())}


def run_jobs(jobs: list[Job], max_actions: int, workers: int,
             game_seconds: float | None) -> list[JobResult]:
    """Play every job (in order, `workers` at a time); never raises for a job's failure."""

    def one(job: Job) -> JobResult:
        if job.out.exists():
            shutil.rmtree(job.out)
        job.out.mkdir(parents=True)
        arg = json.dumps({"games": str(job.games_dir), "out": str(job.out), "seed": job.seed,
                          "max_actions": max_actions, "game": job.game, "options": job.options})
        env = dict(os.environ, PYTHONPATH=str(job.root))
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-c", DRIVER, arg], cwd=job.root, env=env,
                               capture_output=True, text=True, timeout=game_seconds)
            return JobResult(job, time.monotonic() - t0, False, p.returncode, p.stderr[-2000:])
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return JobResult(job, time.monotonic() - t0, True, None, err[-2000:])

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, jobs))


@contextmanager
def checkout(ref: str, repo: Path = ROOT) -> Iterator[tuple[Path, str]]:
    """`with checkout(ref) as (root, commit):` a detached worktree of `ref` of this
    repository, removed (with its administrative files) on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    path = tmp / "tree"
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                                check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(path), commit],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"baseline {ref!r}: {(e.stderr or '').strip() or e}") from None
    try:
        yield path, commit
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                       capture_output=True, text=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, text=True)
        shutil.rmtree(tmp, ignore_errors=True)


def interleave(arms: dict[str, Path], seeds: list[int], games: dict[str, Path], out: Path,
               options: dict[str, dict[str, Any]]) -> Iterator[Job]:
    """Jobs seed by seed, game by game, the arms side by side (their order alternating
    from one game to the next, so neither arm always runs first on a loaded machine)."""
    names = list(arms)
    i = 0
    for seed in seeds:
        for game, gdir in games.items():
            order = names if i % 2 == 0 else names[::-1]
            i += 1
            for arm in order:
                yield Job(arm, seed, game, gdir, out / arm / f"seed{seed}" / "jobs" / game,
                          arms[arm], options.get(arm, {}))
