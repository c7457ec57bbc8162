#!/usr/bin/env bash
# What the train extra costs CI (experiments/LOG.md, issue 47), in one run: a fresh venv, the
# install of '.[test]' as before, then of the extra on top, then the training tests (the ones
# without the extra, then `-m train`), each timed: wall seconds and CPU seconds (user + system,
# which other load on the machine changes less). NO_CACHE=1: pip downloads everything again.
#
#   bash scripts/train_ci_cost.sh            # prints one JSON line at the end
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cache=()
[ "${NO_CACHE:-0}" = 1 ] && cache=(--no-cache-dir)
V="$WORK/venv/bin/python"
step() {  # step NAME COMMAND...: "NAME wall cpu" into $WORK/times
  local name=$1; shift
  /usr/bin/time -o "$WORK/t" -f "%e %U %S" "$@" > "$WORK/$name.log" 2>&1 \
    || { tail -30 "$WORK/$name.log"; exit 1; }
  echo "$name $(cat "$WORK/t")" >> "$WORK/times"
}
"$PY" -m venv "$WORK/venv" && "$V" -m pip install -q --upgrade pip
step install_test "$V" -m pip install -q "${cache[@]}" -e '.[test]'
step install_train_extra "$V" -m pip install -q "${cache[@]}" -e '.[test,train]'
step tests_without_extra "$V" -m pytest -q -p no:cacheprovider tests/test_train_export.py \
    tests/test_train_checkpoint.py
step tests_train_marker "$V" -m pytest -q -p no:cacheprovider -m "train and not vllm" tests/
python3 - "$WORK" "$(du -sm "$WORK/venv" | cut -f1)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
out = {"venv_mb": int(sys.argv[2]), "loadavg_at_end": sys.argv[3]}
for line in (work / "times").read_text().splitlines():
    name, wall, user, system = line.split()
    out[name] = {"wall_s": float(wall), "cpu_s": round(float(user) + float(system), 1)}
    if name.startswith("tests"):
        out[name]["pytest"] = (work / f"{name}.log").read_text().strip().splitlines()[-1]
print(json.dumps(out))
PY
