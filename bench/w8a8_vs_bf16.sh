#!/usr/bin/env bash
# Issue 23's W8A8 against bf16 on a realistic shape: a random bf16 checkpoint of CONFIG
# (bench/random_checkpoint.py), `kestrel quantize` of it into msModelSlim W8A8_DYNAMIC, then
# `kestrel bench latency` on both, alternating: prefill (a 512-token prompt, 1 output) and decode
# (batch 1 after a 32-token prompt, 16 against 48 outputs: one step = the difference / 32).
#   [TYPES="bf16 w8a8 w4a8"] bash bench/w8a8_vs_bf16.sh [RUNS] [BIN] [WORK_DIR] [CONFIG]
# Defaults: 2 runs, build/src/kestrel, /tmp/kestrel-w8a8-bench, bench/configs/llama_4096_4layer
# (Llama-3 8B's widths, 4 layers, the default model's 49152-token vocabulary and tokenizer;
# checkpoints of 2.6 and 1.7 GB). bench/configs/deepseek_v3_4layer (DeepSeek-V3's widths, 4
# layers, 16 experts; 7.7 GB, W8A8 4.3 GB, W4A8 3.3 GB) runs with ../shared's DeepSeek-V3
# tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
BIN=${2:-build/src/kestrel}
WORK=${3:-/tmp/kestrel-w8a8-bench}
CONFIG=${4:-bench/configs/llama_4096_4layer}
if grep -q deepseek_v3 "$CONFIG/config.json"; then
  TOK=${TOKENIZER:-../shared/testdata/tokenizers/deepseek_v3}
else
  TOK=${TOKENIZER:-$(bash scripts/fetch-default-model.sh)}  # its 49152-token vocabulary
fi
# TYPES: which checkpoints, alternating (w4a8: msModelSlim's w4a8 recipe, int4 routed experts).
TYPES=${TYPES:-"bf16 w8a8"}
BF16=$WORK/bf16
[ -f "$BF16/model.safetensors" ] || python3 bench/random_checkpoint.py "$CONFIG" "$BF16"
for name in $TYPES; do
  case $name in
    w8a8) type=W8A8_DYNAMIC ;;
    w4a8) type=W4A8_DYNAMIC ;;
    *) continue ;;
  esac
  [ -f "$WORK/$name/quant_model_weights.safetensors" ] ||
    "$BIN" quantize "$BF16" -o "$WORK/$name" --quant-type "$type"
done
# Without prefix caching: every iteration repeats the same prompt, which would otherwise hit.
latency() {  # MODEL INPUT OUTPUT
  "$BIN" bench latency -m "$1" --tokenizer "$TOK" --threads 2 --input-len "$2" --output-len "$3" \
    --batch-size 1 --num-iters-warmup 1 --num-iters 3 --max-model-len 1024 \
    --kv-cache-memory 256M --no-enable-prefix-caching 2>&1 |
    sed -nE 's/^Avg latency: ([0-9.]+) seconds/\1/p'
}
for run in $(seq "$RUNS"); do
  for name in $TYPES; do
    model=$WORK/$name
    p=$(latency "$model" 512 1) a=$(latency "$model" 32 16) b=$(latency "$model" 32 48)
    awk -v r="$run" -v n="$name" -v p="$p" -v a="$a" -v b="$b" 'BEGIN {
      s = (b - a) / 32; printf "run %s, %s: prefill 512 tokens %.3f s (%.0f tok/s), decode step %.1f ms (%.1f tok/s)\n",
        r, n, p, 512 / p, s * 1000, 1 / s }'
  done
done
