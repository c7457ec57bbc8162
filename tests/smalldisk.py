"""A small tmpfs for full-disk tests (root only; the test is skipped elsewhere).

`with small_tmpfs(path, "400k") as disk:` mounts a tmpfs of that size on `path` (made if
missing) and lazily unmounts it afterwards, whatever the test left open there.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
