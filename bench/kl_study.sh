#!/usr/bin/env bash
# How far the int8 paths are from their references, measured as llama-perplexity
# --kl-divergence measures (issue 40): mean KL divergence and top-1 agreement over a real text
# (default: the GPL-3 text Debian ships, ~8k tokens; 512-token chunks, the second half of each
# scored).
#   bash bench/kl_study.sh weights ["TYPES"]  # per GGUF type (made from the default model's Q4_1 with
#       llama-quantize): Kestrel's int8 activations against its dequantized f32 compute, beside
#       llama.cpp's type against llama.cpp on the same weights dequantized to F32
#   bash bench/kl_study.sh kv                 # KV cache dtypes against the f16 cache (int8 compute)
# TEXT=file CHUNKS=n THREADS=n change the text, the chunks scored (0: all) and the threads.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=$1
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
CHUNKS=${CHUNKS:-0}
THREADS=${THREADS:-2}
Q41=$(bash scripts/fetch-default-model.sh)
DIR=$(dirname "$Q41")
kl() { build/src/kestrel bench kl -f "$TEXT" --chunks "$CHUNKS" -t "$THREADS" "$@" 2>/dev/null | tail -n 1; }
field() { python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"{r['mean_kl']:.5f} ± {r['kl_stderr']:.5f} | {100*r['top1_agreement']:.2f} %\")" "$1"; }
if [[ $MODE == kv ]]; then
  echo "| KV cache (default model, int8 compute) | mean KL vs f16 cache | top-1 agreement |"
  echo "|---|---|---|"
  for t in bfloat16 fp8 "fp8 --calculate-kv-scales" fp8_e5m2 "fp8_e5m2 --calculate-kv-scales" mxfp8; do
    # shellcheck disable=SC2086
    r=$(kl -m "$Q41" --quant-compute int8 --reference-quant-compute int8 \
          --reference-kv-cache-dtype float16 --kv-cache-dtype $t)
    echo "| $t | $(field "$r") |"
  done
  exit 0
fi
LLAMA_BIN=$(bash bench/build_llamacpp.sh)
TYPES=${2:-"Q4_0 Q4_1 Q8_0 Q4_K Q6_K"}
quant() {  # the default model's weights as type $1 (Q4_1 itself for Q4_1)
  local f="$DIR/SmolLM2-135M-Instruct.$1.gguf"
  [[ -s $f ]] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$Q41" "$f" "$1" >/dev/null 2>&1
  echo "$f"
}
echo "| file | Kestrel int8 vs its f32 compute: mean KL | top-1 | llama.cpp vs F32 of the same weights: mean KL | top-1 |"
echo "|---|---|---|---|---|"
for type in $TYPES; do
  model=$(quant "$type")
  f32="$DIR/SmolLM2-135M-Instruct.$type.F32.gguf"
  [[ -s $f32 ]] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$model" "$f32" F32 >/dev/null 2>&1
  k=$(kl -m "$model")
  base=$(mktemp)
  n_chunks=()
  [[ $CHUNKS != 0 ]] && n_chunks=(--chunks "$CHUNKS")
  "$LLAMA_BIN/llama-perplexity" -m "$f32" -f "$TEXT" -c 512 -t "$THREADS" "${n_chunks[@]}" \
    --kl-divergence-base "$base" >/dev/null 2>&1
  out=$("$LLAMA_BIN/llama-perplexity" -m "$model" -f "$TEXT" -c 512 -t "$THREADS" "${n_chunks[@]}" \
    --kl-divergence-base "$base" --kl-divergence 2>&1)
  rm -f "$base"
  lkl=$(sed -nE 's/^Mean +KLD: *([0-9.]+) ± *([0-9.]+).*/\1 ± \2/p' <<<"$out")
  ltop=$(sed -nE 's/^Same top p: +([0-9.]+) ± .*/\1 %/p' <<<"$out")
  echo "| $type | $(field "$k") | $lkl | $ltop |"
done
