"""Files a run writes: whole or not at all, into a folder checked before any work.

The rule: a reader (a resume, `duck score`, a report) sees an old file or a new one, never
half of one, whatever stops the writer (a full disk, a kill); an `--out` that cannot take a
file is one line before anything is played.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """`with replacing(path) as tmp:` write `tmp` (a hidden name beside `path`); when the block
    ends it is renamed over `path`, or removed when the block raised."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_whole(path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all (`replacing`). Raises OSError."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def unwritable(out: str | Path, inside: str = "") -> str | None:
    """Why `out` (and `out/inside`) cannot be made and written, as one line naming `--out`;
    None when both exist and take a file."""
    if Path(out).exists() and not Path(out).is_dir():
        return f"--out {out} is a file, not a folder"
    folder = Path(out, inside)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"--out {out} cannot be written: {e.strerror or e}"
    return None


def fresh_run(out: Path) -> Path:
    """A run folder that starts over: `out/records/` made, the records and conversations an
    earlier run left there removed. Returns the records folder."""
    records = out / "records"
    records.mkdir(parents=True, exist_ok=True)
    for f in [*records.glob("*.jsonl"), *(out / "conversations").glob("*.jsonl*")]:
        f.unlink()
    return records
