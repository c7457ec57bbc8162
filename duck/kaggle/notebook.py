"""notebook.ipynb from notebook.py (`make notebook`, i.e. `python -m duck.kaggle.notebook`).

notebook.py, a jupytext percent script, is the notebook's single source; the .ipynb is
generated from it byte-stably, so that tests/test_notebook.py can tell when they disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duck.paths import REPO


def notebook_json(script: str | Path = REPO / "notebook.py") -> str:
    """The .ipynb text of the jupytext percent script, byte-stable: cell ids are numbered
    (jupytext draws random ones), so a regenerated notebook differs only when the script does."""
    saved = sys.path[:]
    # jupytext tries `import notebook` (the Jupyter package); from the repository root
    # that would find our notebook.py instead.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
    try:
        import jupytext
        import nbformat
    finally:
        sys.path[:] = saved
    nb = jupytext.read(str(script))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
        if cell.cell_type == "code":
            cell["execution_count"], cell["outputs"] = None, []
    return nbformat.writes(nb) + "\n"


def notebook_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m duck.kaggle.notebook",
                                description="write notebook.ipynb from notebook.py (or --check they agree)")
    p.add_argument("--script", default=str(REPO / "notebook.py"))
    p.add_argument("--out", default=str(REPO / "notebook.ipynb"))
    p.add_argument("--check", action="store_true", help="exit 1 when the .ipynb is out of date")
    a = p.parse_args(argv)
    text = notebook_json(a.script)
    out = Path(a.out)
    if a.check:
        same = out.exists() and out.read_text() == text
        print(f"{out}: {'in sync' if same else 'OUT OF DATE: run make notebook'}")
        return 0 if same else 1
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(notebook_main(sys.argv[1:]))
