"""The Kaggle wheel (kaggle-dataset/build.py's `build_project_wheel`) leaves the workbench out:
installed into a fresh environment it plays the bundled games with the explorer, holds no
devkit/, and a workbench command there says so in one line (exit 2).

The fresh environment gets its dependencies from this one's site-packages (a .pth line:
offline, nothing downloaded), and the wheel with `pip install --no-deps --no-index`."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import BUNDLED, ROOT


def _build():
    spec = importlib.util.spec_from_file_location("kaggle_dataset_build", ROOT / "kaggle-dataset" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_kaggle_wheel_plays_without_the_workbench(tmp_path):
    build = _build()
    wheel = build.build_project_wheel(tmp_path / "wheels")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert build.workbench_in(wheel) == [] and {"duck", "scheduler", "prompts"} <= tops and "devkit" not in tops
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=60)
    site = next(env.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet",
                        "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (site / "duck").is_dir() and not (site / "devkit").exists()

    def duck(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(env / "bin" / "duck"), *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)

    gone = subprocess.run([str(env / "bin" / "python"), "-c", "import devkit"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert "No module named 'devkit'" in gone.stderr
    played = duck("play", "--games", str(BUNDLED), "--policy", "explorer", "--out", str(tmp_path / "run"), "--json")
    assert played.returncode == 0, played.stderr[-3000:]
    doc = json.loads(played.stdout)
    assert len(doc["games"]) == 3 and all(g["levels"] >= 1 for g in doc["games"].values())
    for command in ("stub-server", "bench"):
        r = duck(command)
        assert r.returncode == 2 and r.stdout == "", r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"duck {command}: error: ") and "workbench" in lines[0], lines
