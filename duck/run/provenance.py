"""Your own code in the record: a user policy file (`--policy FILE.py:Class`) that plays.

run.json's `policy_files` keeps, per file, its path, sha256, size, where it stands in the
checkout and a copy in the run folder, so the run can be reproduced after the file changed; a
file not committed as it is makes the run dirty. `--resume` refuses a changed file
(`check_unchanged`) unless `--policy-changed-ok`. The fields: docs/runs.md, "The folder".
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

from duck.config import POLICIES, Config


def policy_file(cfg: Config) -> Path | None:
    """The file of a user policy (`path/file.py:Class`), None for a built-in policy."""
    spec = cfg.play.policy
    if spec in POLICIES or ":" not in spec:
        return None
    return Path(spec.rpartition(":")[0])


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_standing(path: Path, root: Path) -> str:
    """tracked (committed as it is), modified, untracked, or outside (not in the checkout at
    `root`, or no git there)."""
    path, root = Path(path).resolve(), Path(root).resolve()
    if not path.is_relative_to(root):
        return "outside"

    def git(*args: str) -> int | None:
        try:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=10).returncode
        except (OSError, subprocess.TimeoutExpired):
            return None
    rel = str(path.relative_to(root))
    if git("ls-files", "--error-unmatch", "--", rel) != 0:
        return "untracked" if git("rev-parse", "--git-dir") == 0 else "outside"
    return "tracked" if git("diff", "--quiet", "HEAD", "--", rel) == 0 else "modified"


def record(cfg: Config, out: Path, root: Path) -> list[dict[str, Any]]:
    """The `policy_files` entries of a run, the copies written into `out/policy/`."""
    path = policy_file(cfg)
    if path is None:
        return []
    folder = out / "policy"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, folder / path.name)
    return [{"path": str(path.resolve()), "sha256": sha256(path), "bytes": path.stat().st_size,
             "git": git_standing(path, root), "copy": f"policy/{path.name}"}]


def mark_dirty(git: dict[str, Any] | None, files: list[dict[str, Any]]) -> dict[str, Any] | None:
    """run.json's `git` with the policy files that are not committed as they are counted in."""
    if git is None:
        return None
    why = ["tracked files differ from the commit"] if git.get("dirty") else []
    why += [f"policy file {Path(f['path']).name} is {f['git']}" for f in files if f["git"] != "tracked"]
    return git | {"dirty": bool(why) or git.get("dirty"), "dirty_because": why}


def check_unchanged(info: dict[str, Any], out: Path, allow: bool) -> list[dict[str, Any]]:
    """Before `--resume`: each recorded policy file as it is now (changed ones with their new
    sha256); a changed or missing file is a ValueError (one line, with how to go on) unless
    `allow`."""
    now = []
    for f in info.get("policy_files") or []:
        path = Path(f["path"])
        current = sha256(path) if path.is_file() else None
        if current != f["sha256"] and not allow:
            what = "is gone" if current is None else \
                f"changed since the run started (sha256 {f['sha256'][:12]} → {current[:12]})"
            raise ValueError(f"--resume: the policy file {path} {what}; the finished games were played by "
                             f"the old one (a copy: {out / f['copy']}): put it back, or pass "
                             "--policy-changed-ok to play the rest with the file as it is now")
        if current != f["sha256"]:
            now.append({"path": str(path), "sha256": current, "was": f["sha256"]})
    return now
