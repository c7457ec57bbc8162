"""The suite's ceiling (tests/conftest.py): a hung test fails with its name and where it stood,
so CI says which test hung instead of ending the whole suite at its own limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import ROOT


def test_a_hung_test_fails_at_the_ceiling_with_its_name_and_the_rest_runs(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n\ndef test_hangs():\n    while True:\n        time.sleep(0.05)\n\n\n"
        "def test_after():\n    assert True\n")
    env = os.environ | {"DUCK_TEST_CEILING_S": "1", "PYTHONPATH": str(ROOT / "tests")}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                        "test_hang.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "test_hang.py::test_hangs ran past 1 s (tests/conftest.py's ceiling): hung" in r.stdout, r.stdout
    assert "test_hang.py:6" in r.stdout and "1 failed, 1 passed" in r.stdout, r.stdout
    assert time.monotonic() - t0 < 120
