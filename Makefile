# The two commands of the README, and a few conveniences.
.PHONY: setup demo test

setup:
	bash scripts/setup.sh

# The main job on the embedded default: the bundled demo games, the non-LLM explorer
# (`make demo RUN=folder`: another run folder).
RUN ?= runs/demo
demo: setup
	.venv/bin/duck play --games tests/games --out $(RUN) --overwrite

# The test command (CI runs exactly this from a clean clone): the lint, then the suite.
test:
	bash scripts/setup.sh --test
	bash scripts/lint.sh
	.venv/bin/python -m pytest -q

# The lint alone (rules: pyproject.toml, [tool.ruff]), of the files git tracks: your own
# untracked files are yours (scripts/lint.sh).
.PHONY: lint
lint:
	bash scripts/lint.sh

# The Kaggle notebook: notebook.ipynb is generated from notebook.py, its single source
# (tests/test_notebook.py fails when the two disagree).
.PHONY: notebook
notebook:
	.venv/bin/python -m duck.kaggle.notebook

# The offline Kaggle dataset (kaggle-dataset/build.py) with the project's Python: it says what
# it will fetch before it fetches (all of it: ~4 GB), e.g. `make kaggle-dataset ARGS=--dry-run`,
# `ARGS="--policy my_policy.py:Patrol"`, `ARGS=--no-vllm` (the small half).
.PHONY: kaggle-dataset
kaggle-dataset: setup
	.venv/bin/python kaggle-dataset/build.py $(ARGS)
