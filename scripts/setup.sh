#!/usr/bin/env bash
# Make .venv with a Python >= 3.12 (arc-agi needs it) and install the project into it.
# Usage: scripts/setup.sh [--test]   (--test also installs the test tools)
# Once installed for the current pyproject.toml it does nothing (.venv/.duck-setup).
set -euo pipefail
cd "$(dirname "$0")/.."
ok() { [ -n "$1" ] && command -v "$1" >/dev/null 2>&1 && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }
PY=""
for cand in "${PYTHON:-}" python3.12 python3.13 python3 \
            "$HOME"/.pyenv/versions/3.12*/bin/python "$HOME"/.pyenv/versions/3.1[3-9]*/bin/python; do
  if ok "$cand"; then PY="$cand"; break; fi
done
[ -n "$PY" ] || { echo "setup: no Python >= 3.12 found; install one (e.g. 'pyenv install 3.12') or set PYTHON=" >&2; exit 1; }
if [ ! -x .venv/bin/python ] || ! ok .venv/bin/python; then
  rm -rf .venv
  "$PY" -m venv .venv
fi
# Installed already for this pyproject.toml (a test install serves both): nothing to do.
want="$(sha256sum pyproject.toml | cut -c1-16) ${1:-}"
stamp=.venv/.duck-setup
if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "$want" ] || [ "$(cat "$stamp")" = "${want% *} --test" ]; } \
   && [ -x .venv/bin/duck ]; then
  echo "setup: .venv up to date ($(.venv/bin/python --version); pyproject.toml unchanged)"
  exit 0
fi
rm -f "$stamp"
# (PYTHONWARNINGS: setuptools' note on every editable install is not ours to act on.)
export PYTHONWARNINGS=ignore
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e '.[test]'
else
  .venv/bin/python -m pip install -q -e .
fi
echo "$want" > "$stamp"
echo "setup: .venv ready ($(.venv/bin/python --version))"
