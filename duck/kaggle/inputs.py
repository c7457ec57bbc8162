"""What Kaggle gives the notebook: the mode (competition rerun or interactive), the inputs
attached under `/kaggle/input` (the competition data, our wheel dataset, the model weights),
vLLM installed offline from the wheel dataset, and the user's own policy packed into it (its
files' sha256 verified before anything plays). Kaggle mounts inputs at depths that have changed
over time, so each is found by what it holds; an explicit `kaggle.*_dir` wins when set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger("duck.kaggle.run")  # the notebook shows this logger's INFO lines

RERUN_ENV = "KAGGLE_IS_COMPETITION_RERUN"
COMPETITION = "arc-prize-2026-arc-agi-3"
DATASET_MARKER = "duck-dataset.json"


def is_rerun(env: dict[str, str] | None = None) -> bool:
    return bool((os.environ if env is None else env).get(RERUN_ENV))


def env_config(env: dict[str, str]) -> tuple[Any, list[str]]:
    """The config from the environment's `DUCK_` variables, and one line per variable that
    does not validate: it is dropped (and reported) instead of costing the submission.
    Variables are taken in as long as they validate together, again and again (one may only
    fit beside another: an interactive budget below the default margin with a smaller margin)."""
    from duck.config import ConfigError, load_config

    def validates(e: dict[str, str]) -> bool:
        try:
            load_config(env=e)
            return True
        except ConfigError:
            return False
    if validates(env):
        return load_config(env=env), []
    keep: dict[str, str] = {}
    left = {k: v for k, v in env.items() if k.startswith("DUCK_")}
    taken = True
    while taken:
        taken = False
        for k in list(left):
            if validates({**keep, k: left[k]}):
                keep[k] = left.pop(k)
                taken = True
    errors = []
    for k, v in left.items():
        try:
            load_config(env={**keep, k: v})
        except ConfigError as e:
            errors.append(f"{k} ignored: {e}")
            print(f"duck.kaggle.run: {k} ignored: {e}", file=sys.stderr)
    return load_config(env=keep), errors


# -- Finding the attached inputs --------------------------------------------------------

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


# -- The GPU driver against what vllm.lock needs ----------------------------------------

def lock_driver_requirement(lock: Path) -> tuple[str, str] | None:
    """(CUDA version, minimum driver) from vllm.lock's `# needs:` line (kaggle-dataset/build.py)."""
    try:
        m = re.search(r"^# needs: CUDA (\S+), NVIDIA driver >= ([\d.]+)", lock.read_text(), re.M)
    except OSError:
        return None
    return (m.group(1), m.group(2)) if m else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def check_driver(lock: Path, env: dict[str, str] | None = None, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Whether this machine's NVIDIA driver (nvidia-smi) can run the CUDA build vllm.lock
    pins, and a sentence saying so. No nvidia-smi, or no GPU: False."""
    need = lock_driver_requirement(lock)
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=timeout_s, env=env)
    except FileNotFoundError:
        return False, "no nvidia-smi on this machine (no GPU driver): vLLM cannot run"
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"nvidia-smi failed ({type(e).__name__}: {e}): vLLM cannot run"
    lines = [line.strip() for line in r.stdout.splitlines() if line.strip()]
    if r.returncode != 0 or not lines:
        return False, f"nvidia-smi found no GPU (exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]})"
    driver, _, gpu = lines[0].partition(",")
    driver, gpu = driver.strip(), gpu.strip()
    if need is None:
        return True, f"driver {driver} on {gpu}; vllm.lock states no CUDA requirement"
    cuda, minimum = need
    if _version(driver) < _version(minimum):
        return False, (f"NVIDIA driver {driver} on {gpu} is older than {minimum}, which the CUDA "
                       f"{cuda} build in vllm.lock needs: vLLM cannot start")
    return True, f"NVIDIA driver {driver} on {gpu} runs CUDA {cuda} (needs >= {minimum})"


# -- Offline installs -------------------------------------------------------------------

def check_python(dataset_dir: Path, version: tuple[int, int] | None = None) -> tuple[bool, str]:
    """Whether this Python is the one the dataset's wheels were built for (duck-dataset.json's
    `python`): Kaggle's default image moved to 3.13 in October 2026 and a cp312 wheelhouse
    does not install there (kernel-metadata.json pins the image by digest against that)."""
    have = ".".join(map(str, version or sys.version_info[:2]))
    try:
        want = str(json.loads((dataset_dir / "duck-dataset.json").read_text()).get("python") or "")
    except (OSError, ValueError):
        return True, f"Python {have}; the dataset states no Python"
    if want and want != have:
        return False, (f"this image's Python is {have} but the wheel dataset is built for {want}: pin the "
                       "GPU image by digest (kaggle-dataset/kernel-metadata.json docker_image)")
    return True, f"Python {have}, as the wheel dataset's"


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


# -- The user's policy, packed into the dataset -----------------------------------------

POLICY_DIR = "policy"  # the dataset's folder for it


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pack_policy(spec: str, dataset_dir: Path, helpers: str | Path | None = None) -> dict:
    """Copy `FILE.py` of `FILE.py:Class` (and the `helpers` folder, beside it) into
    `dataset_dir/policy/`; returns duck-dataset.json's `policy` entry: the spec the notebook
    plays and each file's sha256. Raises ValueError (one line) for a spec it cannot pack."""
    file, _, cls = spec.rpartition(":")
    if not file.endswith(".py") or not cls.isidentifier():
        raise ValueError(f"--policy {spec}: give FILE.py:ClassName (the class the notebook plays)")
    src = Path(file)
    if not src.is_file():
        raise ValueError(f"--policy {spec}: no such file {file}")
    if helpers is not None and not Path(helpers).is_dir():
        raise ValueError(f"--policy-helpers {helpers}: no such folder")
    dst = dataset_dir / POLICY_DIR
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    shutil.copy(src, dst / src.name)
    if helpers is not None:
        shutil.copytree(helpers, dst / Path(helpers).resolve().name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = {str(f.relative_to(dataset_dir)): file_sha256(f) for f in sorted(dst.rglob("*")) if f.is_file()}
    return {"spec": f"{POLICY_DIR}/{src.name}:{cls}", "files": files}


def packed_policy(dataset_dir: Path) -> tuple[str | None, str | None]:
    """The dataset's packed policy as an absolute `FILE.py:Class`, and a problem: a file missing
    or changed since it was packed (its sha256 differs), which keeps it from playing. (None, None)
    when nothing is packed."""
    try:
        entry = json.loads((dataset_dir / DATASET_MARKER).read_text()).get("policy")
    except (OSError, ValueError):
        return None, None
    if not isinstance(entry, dict) or not entry.get("spec"):
        return None, None
    for rel, digest in (entry.get("files") or {}).items():
        f = dataset_dir / rel
        if not f.is_file():
            return None, f"the packed policy file {rel} is missing from the dataset"
        if file_sha256(f) != digest:
            return None, (f"the packed policy file {rel} changed since it was packed (sha256 "
                          f"{file_sha256(f)[:12]}, packed {str(digest)[:12]}): rebuild the dataset with "
                          f"kaggle-dataset/build.py --policy")
    file, _, cls = str(entry["spec"]).rpartition(":")
    return f"{dataset_dir / file}:{cls}", None


def notebook_policy(chosen: str | None, dataset_dir: Path | None) -> tuple[str | None, str | None]:
    """What the notebook plays: `chosen` (play.policy, when set), else the dataset's packed
    policy, else None (the model agent while its server is up, the explorer otherwise); and a
    problem (one line) when the policy asked for cannot play, the default then plays. A file
    policy is loaded here, before anything plays (a relative path is the dataset's)."""
    packed, problem = packed_policy(dataset_dir) if dataset_dir is not None else (None, None)
    spec = chosen or packed
    if spec is None or ":" not in spec:
        return spec, problem
    file, _, cls = spec.rpartition(":")
    path = Path(file)
    if not path.is_absolute() and dataset_dir is not None and (dataset_dir / path).is_file():
        path = dataset_dir / path
    if problem and dataset_dir is not None and path.resolve().is_relative_to((dataset_dir / POLICY_DIR).resolve()):
        return None, problem  # the packed file changed: not played
    from duck.policies import PolicyError, load_policy_file
    try:
        load_policy_file(f"{path.resolve()}:{cls}")
    except PolicyError as e:
        return None, str(e)
    return f"{path.resolve()}:{cls}", problem
