# ---
# jupyter:
#   kaggle:
#     accelerator: nvidiaRtxPro6000
#     isGpuEnabled: true
#     isInternetEnabled: false
#     language: python
#     sourceType: notebook
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # duck-arc3: an offline ARC-AGI-3 agent
#
# The single source of this notebook is `notebook.py` (a jupytext percent script);
# `notebook.ipynb` is generated from it by `make notebook`. All the work is in
# `duck/kaggle/run.py`; each cell below is one step of it.
#
# Inputs: the competition data, the wheel dataset built by `kaggle-dataset/build.py`, and
# the model weights (see docs/kaggle.md). During the competition rerun
# (`KAGGLE_IS_COMPETITION_RERUN` set) the games come from the gateway and the gateway writes
# `submission.parquet`; any other run plays the public games offline and writes a
# placeholder `submission.parquet`. Paths and budgets: `duck/config/` (`KaggleConfig`),
# overridable with `DUCK_SECTION__FIELD` environment variables. The games are played by the
# policy packed into the dataset (`build.py --policy FILE.py:Class`, its sha256 verified first)
# or `DUCK_PLAY__POLICY` when set; else by the model agent (the explorer while no model answers).

# %%
# Offline install from the wheel dataset (standard library only: nothing is installed yet).
import glob
import importlib
import json
import os
import subprocess
import sys
import time

if __name__ != "__main__":  # a tool importing "notebook" must not start a run
    raise ImportError("notebook.py is the Kaggle notebook, not a module")
T0 = time.time()  # the notebook's budget counts from here


def find_dataset(input_dir):
    if os.environ.get("DUCK_KAGGLE__DATASET_DIR"):
        return os.environ["DUCK_KAGGLE__DATASET_DIR"]
    for depth in range(5):
        hits = sorted(glob.glob(os.path.join(input_dir, *["*"] * depth, "duck-dataset.json")))
        if hits:
            return os.path.dirname(hits[0])
    return None


DATASET = find_dataset(os.environ.get("DUCK_KAGGLE__INPUT_DIR", "/kaggle/input"))
print("wheel dataset:", DATASET)
if DATASET:
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--quiet", "--find-links",
                          os.path.join(DATASET, "wheels"), "-r", os.path.join(DATASET, "duck.lock")])
    print("offline install:", "ok" if pip.returncode == 0 else f"FAILED (pip exit {pip.returncode})")
    # Our own wheel (prompts inside as package data); a local rehearsal has none and runs the
    # checkout's installed package instead.
    OURS = json.load(open(os.path.join(DATASET, "duck-dataset.json"))).get("project_wheel")
    if OURS:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                              os.path.join(DATASET, "wheels", OURS)])
        print("duck-arc3:", "ok" if pip.returncode == 0 else f"FAILED (pip exit {pip.returncode})")
    importlib.invalidate_caches()

# %%
# Mode, config, inputs and budget. The first boot's rung of the restart ladder is what
# `duck doctor --soak` said on the first GPU (docs/serving.md, "The first GPU, in order"):
# 0 as planned (MTP on), 1 MTP off.
os.environ.setdefault("DUCK_KAGGLE__START_RUNG", "0")
from duck.kaggle.run import KaggleRun

run = KaggleRun(started_at=T0)

# %%
# vLLM from the dataset into its own venv, then `duck serve` starts (it takes ~9 minutes
# to load; nothing waits for it yet). A serving plan that does not fit starts nothing.
run.start_model()

# %%
# While it loads, what costs no action: the rerun waits for the gateway to list the games
# (/api/games), an interactive run takes the public games from the competition's
# environment_files/; the scorecard is opened and every game made ahead.
run.open_games()

# %%
# Until the server is ready: /v1/models answers and a smoke chat succeeds. If it does not
# come up, the explorer plays.
run.wait_model()

# %%
# Every game through the scheduler's runner; whatever happens, the scorecard is closed,
# vLLM stopped and the outputs written.
try:
    run.play()
finally:
    run.finish()

# %%
print(open(os.path.join(run.out, "summary.json")).read()[:4000])
