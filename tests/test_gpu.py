"""The first run on a real GPU (opt-in: `pytest -m gpu`, never in CI, which has none).

`duck doctor` with the real `vllm` and the real weights: the driver and CUDA against the lock,
vLLM's import in its venv, the plan, `duck serve`'s start, a smoke chat, then the plan's slots of
games (the bundled ones, repeated) played at once by the model through the agent and the kernel.
The doctor's own checks are the field's operating points (decode >= 600 tokens/s at 10 streams,
prefix-cache hit >= 0.9, boot <= 12 min, tool-call failures, `{}` included, <= 2%), so exit 0 is
the pass; the figures go to `runs/gpu-doctor/doctor.json` (keep it: it is the first real
measurement of decode speed, prefix-cache hits, MTP acceptance and tool-call failures).

    DUCK_MODEL__SERVE__MODEL_PATH=/path/to/Qwen3.8-Flash-Next-W4A16-AutoRound \\
    DUCK_MODEL__SERVE__EXECUTABLE=~/.cache/duck-arc3/vllm-0.33.0/bin/vllm \\
        .venv/bin/python -m pytest -m gpu -s tests/test_gpu.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from duck.config import load_config

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.gpu


def test_duck_doctor_on_the_real_model_and_gpu(tmp_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: this is the GPU check")
    serve = load_config().model.serve
    if not Path(serve.model_path).is_dir():
        pytest.skip(f"no model folder at {serve.model_path} (set DUCK_MODEL__SERVE__MODEL_PATH)")
    out = ROOT / "runs" / "gpu-doctor"
    vllm_python = Path(serve.executable).expanduser().parent / "python"
    cmd = [sys.executable, "-m", "duck.cli", "doctor", "--out", str(out), "--game-seconds", "300",
           "--executable", str(Path(serve.executable).expanduser())]
    if vllm_python.exists():
        cmd += ["--vllm-python", str(vllm_python)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600, env=os.environ.copy())
    print(r.stdout[-4000:], r.stderr[-4000:])
    doc = json.loads((out / "doctor.json").read_text())
    assert r.returncode == 0, doc
    f = doc["figures"]
    assert all(c["ok"] for c in doc["checks"].values()), doc["checks"]  # the field's operating points
    assert f["empty_tool_calls"] == 0  # no call lost to the streaming parser
    assert f["harness_share"] < 0.05
