#!/bin/bash
# Queue a sharded `duck ab` on Slurm: a job array of N tasks (ab-shard.sbatch, one shard per
# node, one model server per GPU) and, after the whole array, the merge (ab-merge.sbatch).
#
#   DUCK_AB_SBATCH="--partition=gpu --gres=gpu:4 --time=24:00:00" \
#   experiments/slurm/submit.sh runs/ab/guards-off 4 \
#       --a experiments/baseline.toml \
#       --b experiments/baseline.toml experiments/guards-off.toml \
#       --games environment_files --passes 5 --game-seconds 2700 --workers 16
#
# Arguments: OUT (the experiment folder), N (shards = array tasks), then the arguments of
# `duck ab` except --out and --shard. Run it from the repository (the jobs' working folder).
#
# Environment (also everything ab-shard.sbatch reads, handed to the jobs):
#   DUCK_AB_SBATCH        sbatch options of the shard tasks (GPUs, partition, time, account...)
#   DUCK_AB_ARRAY         which tasks to queue (default 1-N); e.g. "2,5" resubmits two shards
#                         that failed: they resume where they stopped, then the merge reruns
#   DUCK_AB_MERGE_SBATCH  sbatch options of the merge job (default: none; it needs no GPU)
#   DUCK_AB_MERGE_ARGS    options of ab-merge/ab-stats (e.g. "--boot 10000")
#
# Prints one JSON line: {"array": ID, "merge": ID, "out": OUT, "logs": OUT/logs}.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,22p' "$0" >&2; exit 2; }
out=$1 n=$2
shift 2
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit: N must be a positive number of shards, got '$n'" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "submit: sbatch not found (not on a Slurm submission host?)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/logs"
if [ -f "$out/shards/count" ] && [ "$(cat "$out/shards/count")" != "$n" ]; then
  echo "submit: $out was started with $(cat "$out/shards/count") shards, not $n (use a new OUT)" >&2; exit 2
fi
DUCK_AB_OUT=$(cd "$out" && pwd)
DUCK_AB_SHARDS=$n
export DUCK_AB_OUT DUCK_AB_SHARDS

# shellcheck disable=SC2086  # the option strings are meant to split into words
array=$(sbatch --parsable --export=ALL --array="${DUCK_AB_ARRAY:-1-$n}" --output="$DUCK_AB_OUT/logs/shard-%a.job%A.out" \
          ${DUCK_AB_SBATCH:-} "$here/ab-shard.sbatch" "$@")
array=${array%%;*}  # "id;cluster" on multi-cluster sites
# shellcheck disable=SC2086
merge=$(sbatch --parsable --export=ALL --dependency="afterany:$array" --output="$DUCK_AB_OUT/logs/merge.job%j.out" \
          ${DUCK_AB_MERGE_SBATCH:-} "$here/ab-merge.sbatch" ${DUCK_AB_MERGE_ARGS:-})
merge=${merge%%;*}
echo "{\"array\": \"$array\", \"merge\": \"$merge\", \"out\": \"$DUCK_AB_OUT\", \"logs\": \"$DUCK_AB_OUT/logs\"}"
