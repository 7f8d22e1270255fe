#!/usr/bin/env bash
# Offline engine benchmarks on the default model, as recorded in docs/benchmarks.md:
# `kestrel bench throughput` at several --max-num-seqs (the continuous-batching gain) and
# `kestrel bench latency` at batch 1 and 8. Run on an otherwise idle machine.
#   bash bench/engine_throughput.sh [model.gguf]   (env: PROMPTS, IN, OUT, THREADS, SEQS)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$(bash scripts/fetch-default-model.sh)}
PROMPTS=${PROMPTS:-64}
IN=${IN:-128}
OUT=${OUT:-128}
THREADS=${THREADS:-2}
SEQS=${SEQS:-"1 8 32 128"}
BIN=build/src/kestrel
OUTDIR=${OUTDIR:-bench/results}
mkdir -p "$OUTDIR"

for s in $SEQS; do
  echo "== bench throughput: $PROMPTS prompts, $IN in / $OUT out, --max-num-seqs $s"
  "$BIN" bench throughput -m "$MODEL" --threads "$THREADS" --num-prompts "$PROMPTS" \
    --input-len "$IN" --output-len "$OUT" --max-num-seqs "$s" --log-level warning \
    --output-json "$OUTDIR/throughput_seqs$s.json"
done
for b in 1 8; do
  echo "== bench latency: batch $b, 32 in / 128 out"
  "$BIN" bench latency -m "$MODEL" --threads "$THREADS" --batch-size "$b" --input-len 32 \
    --output-len 128 --num-iters-warmup 1 --num-iters 3 --log-level warning \
    --output-json "$OUTDIR/latency_batch$b.json"
done
