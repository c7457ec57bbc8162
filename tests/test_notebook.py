"""notebook.py is the single source of notebook.ipynb (its run end to end: tests/test_rehearse.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from duck.kaggle.notebook import notebook_json


def test_notebook_ipynb_is_generated_from_notebook_py():
    """Fails when someone edits one without the other: run `make notebook`."""
    assert (ROOT / "notebook.ipynb").read_text() == notebook_json(ROOT / "notebook.py"), \
        "notebook.ipynb is out of date: run `make notebook`"


def test_make_notebook_check_tells_a_stale_notebook(tmp_path):
    """`python -m duck.kaggle.notebook --check` (a fresh process: jupytext's random cell ids
    would differ) agrees with what it wrote, and fails once the script changes."""
    script, out = tmp_path / "nb.py", tmp_path / "nb.ipynb"
    script.write_text((ROOT / "notebook.py").read_text())

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "duck.kaggle.notebook", "--script", str(script),
                               "--out", str(out), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)

    assert cli().returncode == 0 and out.read_text() == notebook_json(script)
    assert cli("--check").returncode == 0
    script.write_text(script.read_text() + "\n# %%\nprint('one more cell')\n")
    stale = cli("--check")
    assert stale.returncode == 1 and "OUT OF DATE" in stale.stdout


def test_notebook_is_a_kaggle_notebook():
    nb = json.loads((ROOT / "notebook.ipynb").read_text())
    meta = nb["metadata"]
    assert meta["kernelspec"]["name"] == "python3"
    assert meta["kaggle"]["isInternetEnabled"] is False and meta["kaggle"]["isGpuEnabled"] is True
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)


def test_importing_notebook_py_does_not_start_a_run():
    """Jupyter tools `import notebook`; from the repository root that finds notebook.py."""
    spec = importlib.util.spec_from_file_location("notebook", ROOT / "notebook.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ImportError, match="not a module"):
        spec.loader.exec_module(module)
