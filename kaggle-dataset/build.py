#!/usr/bin/env python3
"""Build the offline Kaggle dataset: wheels for the Kaggle image, the locks, the metadata.

The Kaggle rerun has no internet, so everything the notebook installs comes from this
folder. Two environments, two locks, one `wheels/` folder:

* `duck.lock`: this project's pinned dependencies, installed into the notebook's own
  Python. The project itself goes in as its wheel (`wheels/duck_arc3-*.whl`, the prompt
  templates inside as package data), which the notebook installs with `--no-deps`.
* `vllm.lock`: the pinned vLLM (pyproject's `serve` extra) and its whole closure (torch,
  the CUDA wheels, ...), installed into a venv of its own: vLLM's numba needs numpy<2.5
  while this project pins numpy 2.5.5, so the two cannot share one environment. With it,
  FlashInfer's precompiled kernels (`kernel_requirements`: flashinfer-cubin and
  flashinfer-jit-cache for the lock's FlashInfer and CUDA, what `vllm download-kernels`
  installs; from FlashInfer's own index, not PyPI): without them FlashInfer builds its
  modules with nvcc at start-up or fetches cubins from NVIDIA, and the rerun has no network
  (docs/kaggle.md). `--relock` needs that index reachable.

Both are resolved for the Kaggle platform (Linux x86-64, CPython 3.12, glibc 2.35) with
`pip --platform ... --python-version 3.12 --only-binary=:all:`, whatever machine runs this.
The locks are committed beside this script; `--relock` resolves them again.

    make kaggle-dataset ARGS=--dry-run                 # (the project's Python: .venv)
    python kaggle-dataset/build.py --dry-run           # what would be downloaded, nothing written
    python kaggle-dataset/build.py                     # build/kaggle-dataset/, then the check
    python kaggle-dataset/build.py --no-vllm           # the small half (no vLLM/torch/CUDA)
    python kaggle-dataset/build.py --check-only        # re-run the offline-resolution check
    python kaggle-dataset/build.py --relock            # resolve both locks again
    python kaggle-dataset/build.py --policy my_policy.py:Patrol [--policy-helpers mylib/]
                                                       # your own policy packed in, played by the notebook
    python kaggle-dataset/build.py --policy my_policy.py:Patrol --policy-only
                                                       # only (re)pack it into an existing build

The check installs each lock with `pip install --no-index --find-links OUT/wheels -r LOCK
--dry-run --ignore-installed` for the Kaggle platform: it passes only when the folder alone
resolves everything, and the project's wheel holds no devkit/ (the workbench: `build_project_wheel`
builds it from the tracked files without it). It also verifies SHA256SUMS and the packed policy's
sha256 (what the notebook checks before it plays the policy: duck.kaggle.inputs). Exit status 0
only when all holds. See kaggle-dataset/README.md for publishing the folder and attaching the model weights.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

if sys.version_info < (3, 12):  # this project's own wheel needs it: say so before 4 GB are fetched
    sys.exit(f"build.py needs Python >= 3.12 (this is {sys.version.split()[0]}): run `make kaggle-dataset "
             "ARGS=...`, which uses the project's .venv")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the policy's packing is the notebook's own code (standard library only)
from duck.kaggle.inputs import pack_policy, packed_policy  # noqa: E402
PYTHON_VERSION = "3.12"  # the Kaggle image's Python (3.12.13 in mid-2026)
GLIBC_MINOR = 35  # Ubuntu 22.04 under the Kaggle image: manylinux_2_35 and older wheels run
LOCKS = {"duck": HERE / "duck.lock", "vllm": HERE / "vllm.lock"}
MARKER = "duck-dataset.json"  # the notebook finds the dataset under /kaggle/input by this file
DEFAULT_ID = "YOUR_KAGGLE_USERNAME/duck-arc3-wheels"


# What the wheels weigh, as builds measured them, said before anything is fetched: the whole
# folder 223 wheels, 4.1 GB (vLLM, torch, the CUDA libraries; issue 49); --no-vllm 58 wheels,
# 52 MB (experiments/LOG.md, 2026-12-04).
MEASURED_MB = {"duck": 52, "all": 4100}


def say_plan(locks: dict[str, list[dict]], wheels: Path) -> None:
    """One line before the download: how many wheels, what they weigh, how many are still to fetch."""
    files = {d["file"] for ds in locks.values() for d in ds if d["file"]}
    todo = sum(not (wheels / f).exists() for f in files)
    mb = MEASURED_MB["all" if "vllm" in locks else "duck"]
    size = f"{mb / 1000:.1f} GB" if mb >= 1000 else f"{mb} MB"
    which = " and ".join(f"{w}.lock {len(ds)}" for w, ds in locks.items())
    small = f" (--no-vllm: the small half, {MEASURED_MB['duck']} MB)" if "vllm" in locks else ""
    print(f"build.py: {len(files) + 1} wheels for the Kaggle image ({which}, shared ones once, and this "
          f"project's own), about {size} in all; {todo} to fetch now into {wheels}{small}", file=sys.stderr,
          flush=True)


def platform_args() -> list[str]:
    """pip's --platform does not widen manylinux_2_35 to older tags by itself: list them."""
    tags = [f"manylinux_2_{m}_x86_64" for m in range(GLIBC_MINOR, 16, -1)]
    tags += ["manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]
    out = []
    for t in tags:
        out += ["--platform", t]
    return out + ["--python-version", PYTHON_VERSION, "--implementation", "cp", "--only-binary=:all:"]


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(which: str, vllm: str | None) -> list[str]:
    """Top-level requirements of one lock, from pyproject (the single source of pins)."""
    p = project()
    if which == "duck":
        return list(p["dependencies"])
    pins = [r for r in p["optional-dependencies"]["serve"] if norm(re.split(r"[=<>!~ \[]", r)[0]) == "vllm"]
    if vllm:
        pins = [f"vllm=={vllm}"]
    if not pins:
        raise SystemExit("pyproject's `serve` extra pins no vllm; pass --vllm VERSION")
    return pins


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+ pip " + " ".join(a if " " not in a else repr(a) for a in args[:12])
          + (" ..." if len(args) > 12 else ""), file=sys.stderr, flush=True)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(cmd, check=False, text=True, env=env,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)


def resolve(reqs: list[str], indexes: tuple[str, ...] = ()) -> list[dict]:
    """What pip would install on Kaggle for `reqs`: one dict per distribution (no download
    into the output; pip fetches metadata, and wheels where the index has no metadata)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        r = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                "--target", str(Path(tmp, "target")), *platform_args(), *indexes, *reqs, capture=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
            raise SystemExit(f"resolution failed for {reqs}")
        items = json.loads(report.read_text())["install"]
    out = []
    for it in items:
        url = it["download_info"]["url"]
        out.append({"name": norm(it["metadata"]["name"]), "version": it["metadata"]["version"],
                    "file": url.rsplit("/", 1)[-1],
                    "sha256": (it["download_info"].get("archive_info") or {}).get("hashes", {}).get("sha256")})
    return sorted(out, key=lambda d: d["name"])


# The oldest Linux driver each CUDA toolkit release needs (NVIDIA's CUDA release notes,
# "toolkit driver version"). The notebook compares nvidia-smi's driver with the line
# `driver_line` writes into vllm.lock before it starts vLLM (duck.kaggle.inputs.check_driver).
MIN_DRIVER = {"12.4": "550.54.14", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
              "13.0": "580.65.06", "13.1": "590.44.01"}


FLASHINFER_INDEX = "https://flashinfer.ai/whl"  # flashinfer/__main__.py (`flashinfer download-kernels`)


def kernel_requirements(items: list[dict]) -> tuple[list[str], tuple[str, ...]]:
    """FlashInfer's precompiled kernels for a vLLM lock's flashinfer-python and CUDA runtime
    (flashinfer/__main__.py: the cubin wheel and the jit-cache shim with its providers, as
    `vllm download-kernels` installs them) and pip's arguments for the index holding them;
    nothing without FlashInfer."""
    fi = next((d for d in items if d["name"] == "flashinfer-python"), None)
    rt = next((d for d in items if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", d["name"])), None)
    if fi is None or rt is None:
        return [], ()
    version, label = fi["version"].split("+")[0], "cu" + "".join(rt["version"].split(".")[:2])
    return ([f"flashinfer-cubin=={version}", f"flashinfer-jit-cache=={version}+{label}"],
            ("--extra-index-url", FLASHINFER_INDEX, "--extra-index-url", f"{FLASHINFER_INDEX}/{label}"))


def lock_items(which: str, vllm: str | None) -> tuple[list[str], list[dict]]:
    """A lock's requirements and what they resolve to (vLLM's with FlashInfer's kernels)."""
    reqs = requirements(which, vllm)
    items = resolve(reqs)
    kernels, indexes = kernel_requirements(items) if which == "vllm" else ([], ())
    return (reqs + kernels, resolve(reqs + kernels, indexes)) if kernels else (reqs, items)


def driver_line(items: list[dict]) -> str | None:
    """`# needs: CUDA X.Y, NVIDIA driver >= N` from the CUDA runtime wheel the lock holds."""
    rt = next((d for d in items if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", d["name"])), None)
    if rt is None:
        return None
    cuda = ".".join(rt["version"].split(".")[:2])
    if cuda not in MIN_DRIVER:
        raise SystemExit(f"no known minimum driver for CUDA {cuda}: add it to MIN_DRIVER in build.py")
    return f"# needs: CUDA {cuda}, NVIDIA driver >= {MIN_DRIVER[cuda]} (from {rt['name']}=={rt['version']})"


def write_lock(path: Path, which: str, reqs: list[str], items: list[dict]) -> None:
    head = [f"# {which}.lock: generated by kaggle-dataset/build.py --relock; do not edit by hand.",
            f"# Resolved for the Kaggle image: CPython {PYTHON_VERSION}, Linux x86-64, manylinux_2_{GLIBC_MINOR}.",
            f"# From: {' '.join(reqs)}",
            "# Each line: name==version  # wheel file, sha256 (verified again in the built folder)"]
    if (needs := driver_line(items)) is not None:
        head.append(needs)
    lines = [f"{d['name']}=={d['version']}  # {d['file']} sha256={d['sha256']}" for d in items]
    path.write_text("\n".join(head + lines) + "\n")


def read_lock(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pin, _, comment = line.partition("#")
        name, _, version = pin.strip().partition("==")
        m = re.search(r"(\S+\.whl) sha256=(\w+)", comment)
        out.append({"name": norm(name), "version": version, "file": m.group(1) if m else None,
                    "sha256": m.group(2) if m and m.group(2) != "None" else None,
                    "local": "built from this repository" in comment})
    return out


def relock(which: list[str], vllm: str | None) -> None:
    for w in which:
        reqs, items = lock_items(w, vllm)
        write_lock(LOCKS[w], w, reqs, items)
        print(f"{LOCKS[w].relative_to(ROOT)}: {len(items)} distributions", file=sys.stderr)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(items: list[dict], wheels: Path) -> None:
    want = [d for d in items if not d["local"] and not (d["file"] and (wheels / d["file"]).exists())]
    if not want:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(f"{d['name']}=={d['version']}" for d in want) + "\n")
    try:
        indexes = kernel_requirements(items)[1] if any(d["name"] == "flashinfer-jit-cache" for d in items) else ()
        r = pip("download", "--quiet", "--no-deps", "--dest", str(wheels), *platform_args(), *indexes, "-r", f.name)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise SystemExit("pip download failed")


WORKBENCH = "devkit/"  # the workbench: never on the notebook's path, so never in its wheel (AGENTS.md)


def build_project_wheel(wheels: Path) -> Path:
    """This project's wheel as the notebook installs it: built from a copy of the files git
    tracks (as they are in the working tree) without devkit/."""
    name = norm(project()["name"]).replace("-", "_")
    for old in wheels.glob(f"{name}-*.whl"):
        old.unlink()
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True)
    if tracked.returncode != 0:
        raise SystemExit(f"building this project's wheel needs its git checkout: {tracked.stderr.strip()}")
    with tempfile.TemporaryDirectory(prefix="duck-wheel-") as tmp:
        for rel in tracked.stdout.split("\0"):
            if rel and not rel.startswith(WORKBENCH) and (ROOT / rel).is_file():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, Path(tmp) / rel)
        r = pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels.resolve()), tmp)
    if r.returncode != 0:
        raise SystemExit("building this project's wheel failed")
    return next(wheels.glob(f"{name}-*.whl"))


def workbench_in(wheel: Path) -> list[str]:
    """The files of devkit/ a wheel holds (none in the Kaggle wheel)."""
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if n.startswith(WORKBENCH)]


# The serving profiles' chat templates (with their preserve_thinking branch: Qwen3.8's for
# Flash-Next and Qwen3.8-27B, Qwen3.6's), served with --chat-template when the model
# folder's own lacks that branch (duck.llm.serve.pick_chat_template; on Kaggle the notebook
# points ServeConfig.fallback_chat_template at `<family>/chat_template.jinja` here). They
# are the team's copies beside the checkout, never files of this repository.
SHARED = Path(os.environ.get("DUCK_SHARED_DIR") or ROOT.parent / "shared")
FAMILIES = ("qwen3.8", "qwen3.6")


def copy_templates(out: Path) -> dict[str, str]:
    """Each family's template into `out/<family>/chat_template.jinja`; those missing are warned of."""
    shipped = {}
    for family in FAMILIES:
        src, dst = SHARED / family / "chat_template.jinja", out / family / "chat_template.jinja"
        if not src.is_file():
            print(f"warning: no chat template at {src}: the dataset ships none for {family} "
                  "(the model's own is served)", file=sys.stderr)
            dst.unlink(missing_ok=True)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
        shipped[family] = f"{family}/chat_template.jinja"
    return shipped


def check(out: Path, which: list[str]) -> bool:
    """The folder alone resolves each lock for the Kaggle platform; the sums hold."""
    ok = True
    if (problem := packed_policy(out)[1]) is not None:
        print(f"check: {problem}", file=sys.stderr)
        ok = False
    for own in (out / "wheels").glob(f"{norm(project()['name']).replace('-', '_')}-*.whl"):
        if workbench := workbench_in(own):
            print(f"check: {own.name} holds devkit/ ({len(workbench)} files): the workbench stays out",
                  file=sys.stderr)
            ok = False
    sums = out / "SHA256SUMS"
    if sums.exists():
        for line in sums.read_text().splitlines():
            digest, name = line.split(None, 1)
            f = out / "wheels" / name.strip()
            if not f.exists() or sha256(f) != digest:
                print(f"check: {name} is missing or its sha256 differs", file=sys.stderr)
                ok = False
    for w in which:
        lock = out / f"{w}.lock"
        if not lock.exists():
            print(f"check: {lock} missing", file=sys.stderr)
            ok = False
            continue
        for d in read_lock(lock):
            if d["sha256"] and d["file"] and (out / "wheels" / d["file"]).exists() \
                    and sha256(out / "wheels" / d["file"]) != d["sha256"]:
                print(f"check: {d['file']} does not match the lock's sha256", file=sys.stderr)
                ok = False
        with tempfile.TemporaryDirectory() as tmp:
            r = pip("install", "--dry-run", "--ignore-installed", "--no-index", "--find-links",
                    str(out / "wheels"), "--target", str(Path(tmp, "t")), *platform_args(),
                    "-r", str(lock), capture=True)
        if r.returncode != 0:
            print(f"check: {w}.lock does NOT resolve from {out}/wheels alone:\n{r.stderr[-3000:]}",
                  file=sys.stderr)
            ok = False
        else:
            n = next((ln for ln in r.stdout.splitlines() if ln.startswith("Would install")), "")
            print(f"check: {w}.lock resolves offline from the folder alone "
                  f"({len(n.split()) - 2} distributions)")
    return ok


def metadata(dataset_id: str) -> dict:
    return {"title": "duck-arc3 offline wheels", "id": dataset_id,
            "subtitle": "vLLM and duck-arc3 wheels for the ARC-AGI-3 notebook (no internet)",
            "licenses": [{"name": "other"}],
            "description": "Built by kaggle-dataset/build.py of duck-arc3. Install with "
                           "`pip install --no-index --find-links wheels -r duck.lock`; vLLM goes into "
                           "its own venv from vllm.lock (the notebook does both)."}


def repack_policy(out: Path, spec: str | None, helpers: str | None) -> int:
    """`--policy-only`: the policy packed into an existing build (its marker updated), checked."""
    marker = out / MARKER
    if not spec or not marker.is_file():
        raise SystemExit("--policy-only needs --policy FILE.py:Class and a build in --out (run the full build first)")
    doc = json.loads(marker.read_text())
    try:
        doc["policy"] = pack_policy(spec, out, helpers)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    marker.write_text(json.dumps(doc, indent=2) + "\n")
    problem = packed_policy(out)[1]
    print(problem or f"packed {doc['policy']['spec']} into {out} ({len(doc['policy']['files'])} files, sha256 each)")
    return 1 if problem else 0


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def dry_run(locks: dict[str, list[dict]], out: Path) -> int:
    """`--dry-run`: every wheel the build would fetch or build, what it would write; nothing written."""
    seen = set()
    for w in locks:
        for d in locks[w]:
            what = "build" if d["local"] else "download"
            where = d["file"] or "(this repository)"
            if (d["name"], d["version"]) not in seen:
                print(f"{w}\t{what}\t{d['name']}=={d['version']}\t{where}")
            seen.add((d["name"], d["version"]))
        print(f"{w}.lock: {len(locks[w])} distributions", file=sys.stderr)
    print(f"duck\tbuild\t{norm(project()['name'])}=={project()['version']}\t(this repository: its wheel)")
    print(f"would write {out}/: wheels/ ({len(seen)} files), duck.lock"
          + (", vllm.lock" if "vllm" in locks else "")
          + f", {{{','.join(FAMILIES)}}}/chat_template.jinja ({SHARED}), {MARKER}, dataset-metadata.json, "
          "SHA256SUMS, README.md", file=sys.stderr)
    say_plan(locks, out / "wheels")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "build" / "kaggle-dataset"), help="the folder to upload")
    p.add_argument("--dry-run", action="store_true", help="list what would be downloaded; write nothing")
    p.add_argument("--relock", action="store_true", help="resolve the locks again (needs the index)")
    p.add_argument("--no-vllm", action="store_true", help="only duck.lock (no vLLM, torch, CUDA)")
    p.add_argument("--vllm", default=None, help="vLLM version (default: pyproject's serve extra)")
    p.add_argument("--check-only", action="store_true", help="only the offline-resolution check of --out")
    p.add_argument("--id", default=os.environ.get("DUCK_DATASET_ID", DEFAULT_ID),
                   help="Kaggle dataset id owner/slug for dataset-metadata.json")
    p.add_argument("--policy", default=None, metavar="FILE.py:CLASS",
                   help="pack your own policy (README, 'Your own policy'); the notebook plays it, its sha256 checked")
    p.add_argument("--policy-helpers", default=None, metavar="DIR", help="a folder the policy imports, packed beside it")
    p.add_argument("--policy-only", action="store_true", help="only (re)pack --policy into --out's existing build")
    a = p.parse_args(argv)
    which = ["duck"] if a.no_vllm else ["duck", "vllm"]
    out = Path(a.out)

    if a.policy_only:
        return repack_policy(out, a.policy, a.policy_helpers)
    if a.check_only:
        return 0 if check(out, which) else 1
    if a.relock or a.vllm or any(not LOCKS[w].exists() for w in which):
        if a.dry_run:  # resolve without touching the committed locks
            for w in which:
                items = lock_items(w, a.vllm)[1]
                for d in items:
                    print(f"{w}\t{d['name']}=={d['version']}\t{d['file']}")
                print(f"{w}: {len(items)} wheels to download", file=sys.stderr)
            return 0
        relock(which, a.vllm)
    locks = {w: read_lock(LOCKS[w]) for w in which}
    if a.dry_run:
        return dry_run(locks, out)
    wheels = out / "wheels"
    say_plan(locks, wheels)
    wheels.mkdir(parents=True, exist_ok=True)
    for w in which:
        download(locks[w], wheels)
    own = build_project_wheel(wheels)
    keep = {d["file"] for w in which for d in locks[w] if d["file"]} | {own.name}
    for f in wheels.iterdir():
        if f.name not in keep:
            f.unlink()  # wheels of an older lock
    templates = copy_templates(out)
    try:
        policy = pack_policy(a.policy, out, a.policy_helpers) if a.policy else None
    except ValueError as e:
        raise SystemExit(str(e)) from None
    for w in which:
        shutil.copy(LOCKS[w], out / f"{w}.lock")
    for stale in {"duck", "vllm"} - set(which):
        (out / f"{stale}.lock").unlink(missing_ok=True)
    shutil.copy(HERE / "README.md", out / "README.md")
    (out / "SHA256SUMS").write_text("".join(f"{sha256(f)}  {f.name}\n" for f in sorted(wheels.iterdir())))
    (out / "dataset-metadata.json").write_text(json.dumps(metadata(a.id), indent=2) + "\n")
    (out / MARKER).write_text(json.dumps({
        "name": "duck-arc3-wheels", "project": project()["name"], "version": project()["version"],
        "python": PYTHON_VERSION, "platform": f"manylinux_2_{GLIBC_MINOR}_x86_64",
        "locks": {w: f"{w}.lock" for w in which}, "wheels": "wheels", "project_wheel": own.name,
        "chat_templates": templates,
        "chat_template": templates.get("qwen3.6"),  # (read by older notebooks)
        "policy": policy,  # the user's policy the notebook plays (duck.kaggle.inputs.packed_policy), or null
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit()}, indent=2) + "\n")
    size = sum(f.stat().st_size for f in wheels.iterdir())
    print(f"built {out}: {len(list(wheels.iterdir()))} wheels, {size / 2**20:.0f} MiB")
    return 0 if check(out, which) else 1


if __name__ == "__main__":
    sys.exit(main())
