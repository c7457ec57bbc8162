#!/usr/bin/env bash
# Make the pinned vLLM's own venv on this (CPU-only) machine, for the opt-in conformance
# tests (pytest -m vllm): vLLM's request validation, chat-template rendering, tool and
# reasoning parsers and streaming generator run here without a GPU engine.
#
#   bash scripts/vllm-venv.sh            # -> $DUCK_VLLM_VENV (default ~/.cache/duck-arc3/vllm-<version>)
#   bash scripts/vllm-venv.sh 0.19.0     # another version beside it (the stream-interval
#                                        # measurement runs 0.19's parser too: tests/conformance)
#
# The vLLM version is pyproject's `serve` extra (the one place pins live). PyPI's torch for
# that vLLM is a CUDA build of several GB; nothing here needs a GPU. The venv lives outside
# the repository (or set DUCK_VLLM_VENV to a git-ignored folder), never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
PIN=$(python3 - <<'PY'
import re, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["serve"]
print(next(r for r in extra if re.match(r"vllm\s*==", r)).replace(" ", ""))
PY
)
VERSION=${1:-${PIN#vllm==}}
PIN="vllm==$VERSION"
VENV=${DUCK_VLLM_VENV:-$HOME/.cache/duck-arc3/vllm-$VERSION}
PY=""
for cand in "${PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python" "$HOME"/.pyenv/versions/3.12*/bin/python; do
  if [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    PY="$cand"; break
  fi
done
[ -n "$PY" ] || { echo "vllm-venv: no Python 3.12 found (set PYTHON=)" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# Exactly the pin (its own resolution pulls torch, transformers, the parsers' deps).
"$VENV/bin/python" -m pip install "$PIN"
# Our package is not installed here: the flag check imports duck.llm.serve from the worktree
# (PYTHONPATH) to build the argv exactly as `duck serve` does (it needs only pydantic,
# which vLLM brings), so one venv serves every checkout.
"$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm-venv: vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
echo "vllm-venv: $VENV"
