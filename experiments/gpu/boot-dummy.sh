#!/usr/bin/env bash
# The one short GPU check of issue 26 (run it once on a GPU with the vLLM 0.33 stack; ~8 min):
# boot vLLM 0.33 with --load-format dummy on a reduced Flash-Next-shaped model
# (experiments/gpu/dummy_model.py: real widths, 4 layers, W4A16 AutoRound config) with
# exactly the flags `duck serve` builds for the flash-next profile (FP8 KV, MTP 3, the n-gram
# table's cpu_offload, prefix caching on a hybrid model, max_pixels, stream interval 1),
# then drive it with our client (experiments/gpu/drive.py: streamed tool calls, prefix-cache
# hits across turns, 10 concurrent streams). Writes $OUT/: nvidia-smi.txt, serve.json (the
# ready line or the error), vllm.log's tail, drive.json. Record what booted and what failed
# in experiments/LOG.md.
#
#   OUT=runs/gpu-dummy bash experiments/gpu/boot-dummy.sh
#
# Needs: an NVIDIA GPU with driver >= 580.65 (CUDA 13), vLLM 0.33's venv ($DUCK_VLLM_VENV,
# else ~/.cache/duck-arc3/vllm-0.33.0; made from build/kaggle-dataset/wheels when absent and
# the wheelhouse is there: `python kaggle-dataset/build.py` on a machine with PyPI), and this
# project's .venv (made the same way from the wheelhouse when absent). The lent H200 device
# machine cannot run it: it has torch 2.11 and no vLLM, nothing can be fetched there, and
# what a call may carry (64 MiB) is less than vLLM's wheel alone (336 MB).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu-dummy}
mkdir -p "$OUT"
WHEELS=build/kaggle-dataset/wheels
VENV=${DUCK_VLLM_VENV:-$HOME/.cache/duck-arc3/vllm-0.33.0}
PY312=$(command -v python3.12 || command -v python3)
log() { echo "boot-dummy: $*" | tee -a "$OUT/steps.txt"; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || log "no nvidia-smi"
if [ ! -x "$VENV/bin/vllm" ]; then
  [ -d "$WHEELS" ] || { log "no vLLM venv at $VENV and no wheelhouse at $WHEELS"; exit 3; }
  "$PY312" -m venv "$VENV" && "$VENV/bin/pip" install -q --no-index --find-links "$WHEELS" -r kaggle-dataset/vllm.lock \
    || { log "vLLM install from the wheelhouse failed"; exit 3; }
fi
if [ ! -x .venv/bin/duck ]; then
  "$PY312" -m venv .venv && .venv/bin/pip install -q --no-index --find-links "$WHEELS" -r kaggle-dataset/duck.lock \
    && .venv/bin/pip install -q --no-index --no-deps -e . || { log "duck's venv failed"; exit 3; }
fi
"$VENV/bin/python" experiments/gpu/dummy_model.py "$OUT/model" > "$OUT/model.json" || { log "model folder failed"; exit 4; }
PORT=8011
# duck serve with the profile's flags; the dummy weights and this card's memory are the only changes.
.venv/bin/duck serve --executable "$VENV/bin/vllm" --model-path "$OUT/model" --port $PORT --log-dir "$OUT" \
  --set 'model.serve.extra_args=["--load-format","dummy"]' model.serve.ready_timeout_s=480 \
  model.serve.gpu_memory_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) \
  > "$OUT/serve.json" 2> "$OUT/serve.err" &
SERVE=$!
for _ in $(seq 1 500); do
  grep -q '"ready"' "$OUT/serve.json" 2>/dev/null && break
  kill -0 $SERVE 2>/dev/null || break
  sleep 1
done
log "serve: $(head -c 600 "$OUT/serve.json")"
if grep -q '"ready": true' "$OUT/serve.json"; then
  timeout 300 .venv/bin/python experiments/gpu/drive.py "http://127.0.0.1:$PORT" Qwen3.8-Flash-Next "$OUT/drive.json" \
    > "$OUT/drive.out" 2>&1 || log "drive exited $?"
fi
kill -TERM $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
tail -n 400 "$OUT/vllm_0.log" > "$OUT/vllm-tail.log" 2>/dev/null
grep -E "KV cache|kv cache|Maximum concurrency|block size|mamba|engram|Engram|speculative|MTP|ERROR|Error" "$OUT/vllm_0.log" \
  | head -n 80 > "$OUT/vllm-key-lines.txt" 2>/dev/null
log "done: $(ls "$OUT")"
