"""notebook.py is the single source of notebook.ipynb; the notebook stays thin."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from conftest import ROOT
from duck.kaggle.notebook import notebook_json


def test_notebook_ipynb_is_generated_from_notebook_py():
    """Fails when someone edits one without the other: run `make notebook`."""
    assert (ROOT / "notebook.ipynb").read_text() == notebook_json(ROOT / "notebook.py"), \
        "notebook.ipynb is out of date: run `make notebook`"


def test_generation_is_byte_stable():
    assert notebook_json(ROOT / "notebook.py") == notebook_json(ROOT / "notebook.py")


def test_notebook_is_a_kaggle_notebook():
    nb = json.loads((ROOT / "notebook.ipynb").read_text())
    meta = nb["metadata"]
    assert meta["kernelspec"]["name"] == "python3"
    assert meta["kaggle"]["isInternetEnabled"] is False and meta["kaggle"]["isGpuEnabled"] is True
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)


def test_notebook_stays_thin_and_closes_in_a_finally():
    src = (ROOT / "notebook.py").read_text()
    cells = [c for c in re.split(r"^# %%.*$", src, flags=re.M)[1:]]
    code_lines = [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code_lines) <= 45, "keep notebook.py thin: the work belongs in duck/kaggle.py"
    assert "from duck.kaggle.run import KaggleRun" in src
    assert re.search(r"try:\n\s+run\.play\(\)\nfinally:\n\s+run\.finish\(\)", src)
    assert len(cells) >= 5


def test_importing_notebook_py_does_not_start_a_run():
    """Jupyter tools `import notebook`; from the repository root that finds notebook.py."""
    spec = importlib.util.spec_from_file_location("notebook", ROOT / "notebook.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ImportError, match="not a module"):
        spec.loader.exec_module(module)
