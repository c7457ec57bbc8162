# The two commands of the README, and a few conveniences.
.PHONY: setup demo test

setup:
	bash scripts/setup.sh

# The main job on the embedded default: the bundled demo games, the non-LLM explorer.
demo: setup
	.venv/bin/duck play --games tests/games --out runs/demo --overwrite

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
