#!/usr/bin/env bash
# The lint of `make test` and `make lint`: ruff (rules: pyproject.toml) on the Python files git
# tracks, so that a file of your own you have not added (a policy you are writing) is yours to
# lint; outside a git checkout (a tarball), on everything.
set -euo pipefail
cd "$(dirname "$0")/.."
if files=$(git ls-files -- '*.py' 2>/dev/null) && [ -n "$files" ]; then
  tracked=()
  while IFS= read -r f; do [ -e "$f" ] && tracked+=("$f"); done <<< "$files"  # (not one deleted here)
  exec .venv/bin/ruff check --force-exclude "${tracked[@]}"
fi
exec .venv/bin/ruff check .
