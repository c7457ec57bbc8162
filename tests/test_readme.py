"""The README's commands run as written: every command block of README.md is either run here
(in a temporary folder: `runs/` there, free ports, the README's policy file there) or named
in NOT_HERE with where it runs instead (another test; by hand: a GPU, the public games, a
hosted key, 4 GB of wheels). A new block that is in neither fails this test."""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DUCK = str(Path(sys.executable).parent / "duck")
NOT_HERE = {  # the first line's start: where it runs instead
    "make test": "CI itself (.ci/run)",
    ".venv/bin/duck play --games DIR": "a synopsis, not a command",
    ".venv/bin/duck play --games environment_files": "needs the public games: by hand (experiments/LOG.md)",
    "export OPENROUTER_API_KEY": "needs a hosted provider's key: by hand",
    "make kaggle-dataset": "fetches 4 GB: by hand; its first line is checked below (ARGS=--dry-run)",
    ".venv/bin/duck rehearse --policy": "tests/test_kaggle_policy.py (the README's example in the notebook)",
    "OUT=runs/gpu-dummy": "needs a GPU",
}


def blocks() -> list[str]:
    """Every indented command block of the README (fenced blocks are the example policy and the layout)."""
    text = re.sub(r"```.*?```", "", (ROOT / "README.md").read_text(), flags=re.S)
    return [m.group(0) for m in re.finditer(r"(?m)(?:^    .*\S.*\n)+", text)]


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_block(block: str, tmp: Path) -> list[str]:
    """Run a block's commands in order (`runs/` under `tmp`; a `... &` server started, waited for
    until it prints its first line, stopped at the end); returns each command's stderr."""
    (tmp / "my_policy.py").write_text((ROOT / "tests/fixtures/my_policy.py").read_text())
    ports = {p: str(free_port()) for p in re.findall(r"--port (\d+)|:(\d+)\b", block) for p in p if p}
    servers, errs = [], []
    try:
        for cmd in commands(block):
            cmd = cmd.replace(".venv/bin/duck", DUCK).replace("runs/", f"{tmp}/runs/")
            cmd = cmd.replace("my_policy.py", f"{tmp}/my_policy.py")
            for old, new in ports.items():
                cmd = re.sub(rf"\b{old}\b", new, cmd)
            if cmd == "make demo":  # (its setup step: the test below)
                cmd = f"make -s -o setup demo RUN={tmp}/runs/demo"
            if cmd.endswith("&"):
                servers.append(subprocess.Popen(["bash", "-c", cmd[:-1]], cwd=ROOT, text=True,
                                                start_new_session=True, stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL))
                said = select.select([servers[-1].stdout], [], [], 120)[0]  # its URL: it listens
                assert said and servers[-1].stdout.readline(), f"{cmd}: printed nothing"
                continue
            r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"{cmd}\n{r.stderr[-2000:]}"
            errs.append(r.stdout + r.stderr)
    finally:
        for s in servers:  # the shell and the server in it
            os.killpg(s.pid, signal.SIGTERM)
            s.wait(timeout=30)
    return errs


def test_every_readme_command_block_runs_or_says_where_it_runs(tmp_path):
    ran = {}
    for block in blocks():
        first = commands(block)[0]
        if not any(first.startswith(k) for k in NOT_HERE):
            ran[first] = run_block(block, tmp_path)
    wanted = ("make demo", ".venv/bin/duck report", ".venv/bin/duck play --games tests/games --policy my",
              ".venv/bin/duck ab", "OPENAI_API_KEY=k", ".venv/bin/duck stub-server")
    assert [k for k in wanted if not any(r.startswith(k) for r in ran)] == []
    demo = ran["make demo"][0]  # the run's score is the last line
    doc = json.loads((tmp_path / "runs/demo/score.json").read_text())
    assert demo.strip().splitlines()[-1].startswith(f"duck play: score {doc['score']:.3f}% (the run's score")
    from PIL import Image
    gif = json.loads(ran[".venv/bin/duck report runs/demo"][1].splitlines()[0])  # duck gif's line
    with Image.open(gif["gif"]) as im:
        assert (im.n_frames, list(im.size)) == (gif["frames"], gif["size"]) and gif["frames"] > 100
    assert json.loads((tmp_path / "runs/ab-demo/ab.json").read_text())["n_pairs"] == 6
    for run in ("runs/stub", "runs/hosted-stub", "runs/patrol"):
        assert json.loads((tmp_path / run / "score.json").read_text())["run_status"] == "complete", run


def test_a_second_setup_does_nothing():
    """`make demo` and `make test` run scripts/setup.sh: once it has installed the project for this
    pyproject.toml (its stamp, .venv/.duck-setup), it installs nothing and says nothing of pip's."""
    stamp = ROOT / ".venv" / ".duck-setup"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if not stamp.is_file() or not stamp.read_text().startswith(digest):
        pytest.skip("this .venv was not made by scripts/setup.sh for this pyproject.toml (CI's is)")
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("setup: .venv up to date") and r.stderr == "", r


def test_the_kaggle_build_says_what_it_will_fetch_with_the_projects_python():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    r = subprocess.run(["make", "-s", "kaggle-dataset", "ARGS=--dry-run"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    n = len({x.split("\t")[3] for x in r.stdout.splitlines() if x.endswith(".whl")})
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"build.py: {n + 1} wheels for the Kaggle image") and " GB in all" in line, line
    old = shutil.which("python3.11")  # the machine's other Python: one line, before anything is fetched
    if old:
        r = subprocess.run([old, str(ROOT / "kaggle-dataset/build.py")], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1 and "make kaggle-dataset" in r.stderr and "Python >= 3.12" in r.stderr
