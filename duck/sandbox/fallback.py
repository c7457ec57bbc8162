"""The file-modes fallback (host side). Wherever the worker has a uid of its own but no mount
namespace (duck.sandbox.wall.isolation.without_mount_namespace), `games_for_play` closes the run's
folder (its run.json names the games' path) and its records and conversations folders (0700):
Landlock does not mediate stat, and a worker once watched the records being written (issue 37).
Where neither Landlock nor a mount namespace holds (`relies_on_file_modes`), only file modes keep
the games from it too, and `games_for_play` also plays them from a root-only copy (0700, root's);
keeps the original folder's path out of this process's command line (readable by every process
in /proc/<pid>/cmdline: the red team found the games there, issue 30), overwriting the argv bytes
in place, so that the play workers forked afterwards inherit the scrubbed copy; and says once,
loudly, when the original folder is itself open to other users (a worker that guesses its path
can read it; on Kaggle /kaggle/input is read-only). Other processes' /proc entries: hidepid where
a mount namespace exists, else the scrubbed command line and Landlock, which denies /proc.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from duck.sandbox.wall import isolation
from duck.sandbox.wall.confine import closed_ancestor

log = logging.getLogger(__name__)


def _arg_area() -> tuple[int, int] | None:
    """Start and end addresses of this process's argv strings (fields 48-49 of /proc/self/stat)."""
    try:
        with open("/proc/self/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        start, end = int(rest[45]), int(rest[46])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end) if 0 < start < end else None


def hide_from_cmdline(paths: list[str]) -> int:
    """Overwrite every occurrence of `paths` (as given and resolved) in this process's argv
    area with `*`; returns how many were hidden. Python's sys.argv is a copy and unchanged."""
    area = _arg_area()
    if area is None:
        return 0
    start, end = area
    raw = ctypes.string_at(start, end - start)
    needles = {os.fsencode(p) for p in paths if p} | {os.fsencode(os.path.realpath(p)) for p in paths if p}
    hits = 0
    for needle in sorted(needles, key=len, reverse=True):
        if len(needle) < 2:
            continue
        at = raw.find(needle)
        while at >= 0:
            ctypes.memmove(start + at, b"*" * len(needle), len(needle))
            raw = raw[:at] + b"*" * len(needle) + raw[at + len(needle):]
            hits += 1
            at = raw.find(needle, at + len(needle))
    return hits


def open_to_others(path: Path) -> bool:
    """Whether a user other than the owner can reach and list `path` (every parent traversable,
    the folder itself readable by others)."""
    real = os.path.realpath(path)
    if closed_ancestor(real):
        return False
    try:
        return bool(os.stat(real).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def close_run_folders(records: Path) -> None:
    """The run's folder (its run.json names the command and the games' path, its score.json
    and logs what was played) and its records and conversations folders, 0700 (root's)."""
    for folder in (records.parent, records, records.parent / "conversations"):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)


@contextmanager
def games_for_play(games_dir: Path, records: Path, off: list[str]) -> Iterator[Path]:
    """The folder to play from: `games_dir` itself, or a root-only copy when file modes are
    the only wall between the kernel's uid and the games (records and conversations closed,
    the original's path kept out of the command line); the run's folders are closed wherever
    no mount namespace hides them."""
    if isolation.without_mount_namespace(off):
        close_run_folders(records)
    if not isolation.relies_on_file_modes(off):
        yield games_dir
        return
    hide_from_cmdline([str(games_dir)])
    if open_to_others(games_dir):
        log.warning("sandbox: file modes are the only wall here (no Landlock, no mount namespace); the games "
                    "are played from a root-only copy, but the original folder is open to other users and a "
                    "kernel that guesses its path can read it")
    with tempfile.TemporaryDirectory(prefix="duck-games-") as tmp:  # mode 0700, root's
        copy = Path(tmp) / "games"
        shutil.copytree(games_dir, copy, symlinks=False)
        yield copy
