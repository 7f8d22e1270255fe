#!/usr/bin/env bash
# Issue 23's decode at long context with an f16 against a quantized KV cache: `kestrel generate`
# on the default model (SmolLM2-135M, Q4_1: 30 layers of 3 KV heads of 64) after an 8,000-token
# prompt of pseudo-random ids, 64 greedy tokens, alternating the cache types RUNS times; prints
# the decode tok/s each run reports and the KV bytes a step reads at that context.
#   bash bench/kv_cache_decode.sh [RUNS] [BIN] [TYPES]   (default: 2, build/src/kestrel,
#   "fp16 fp8 mxfp8 int8"; int8 needs a C8 checkpoint, so it is left out of the default)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
BIN=${2:-build/src/kestrel}
TYPES=${3:-"fp16 fp8 mxfp8"}
MODEL=$(bash scripts/fetch-default-model.sh)
CTX=8000
IDS=$(python3 -c "import random; r = random.Random(1); print(','.join(str(r.randrange(100, 49000)) for _ in range($CTX)))")
for run in $(seq "$RUNS"); do
  for t in $TYPES; do
    line=$("$BIN" generate -m "$MODEL" --prompt-ids "$IDS" -n 64 --ignore-eos --temperature 0 \
      --kv-cache-dtype "$t" --max-model-len 8192 --threads 2 --print-ids 2>&1 | grep -o 'decode: .*')
    # K and V of 30 layers x 3 heads x 64 values per token, at the context's middle.
    bytes=$(python3 -c "
b = {'fp16': 2, 'fp8': 1, 'mxfp8': 33 / 32}['$t']
print(round(2 * 30 * 3 * 64 * b * ($CTX + 32) / 1e6, 1))")
    echo "run $run, $t: $line; KV read per step $bytes MB"
  done
done
