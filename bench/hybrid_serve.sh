#!/usr/bin/env bash
# Issue 22's hybrid models on a Qwen3.5-MoE shape with dummy weights
# (bench/configs/qwen3_5_moe_4layer: Qwen3.5-35B-A3B's widths, layers [linear x3, full], 64
# experts of 512 features, top-8, the gated shared expert, bf16):
#   1. decode: `kestrel bench latency` at 16 and 48 outputs after a 32-token prompt, batch 1;
#      one decode step = the difference / 32 (docs/benchmarks.md has the bytes it reads);
#   3. (PARTS=3) decode with the MTP layer drafting k = 3 against plain decode, alternating,
#      the same latency runs: with dummy weights the drafts are all rejected, so this measures
#      what a verify step costs (4 rows, the MTP passes, the state snapshots and the rollback);
#   2. a shared-prefix workload: `kestrel bench serve`, random prompts of a 512-token shared
#      prefix + 32 own tokens, 16 outputs, 32 requests, 4 at a time, against the server with
#      prefix caching (state checkpoints) and without, alternating; prints mean TTFT and the
#      server's prefix-cache hit rate (vllm:prefix_cache_hits_total / queries_total).
#   bash bench/hybrid_serve.sh [RUNS] [BIN]   (default: 2 runs of build/src/kestrel; PARTS=123)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
BIN=${2:-build/src/kestrel}
MODEL=bench/configs/qwen3_5_moe_4layer
TOK=$(bash scripts/fetch-default-model.sh)  # its 49152-token vocabulary is the config's
source bench/thirdparty_lib.sh
PORT=$(tp_free_port)
trap tp_stop_server EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v m="$1" '$1 ~ "^"m {s += $2} END {print s + 0}'; }

PARTS=${PARTS:-123}
# Seconds of one batch-1 latency run: 32-token prompt, $1 outputs, optional speculative config $2.
latency() {
  "$BIN" bench latency -m "$MODEL" --load-format dummy --tokenizer "$TOK" --threads 2 \
    --input-len 32 --output-len "$1" --batch-size 1 --num-iters-warmup 1 --num-iters 3 \
    --max-model-len 1024 --kv-cache-memory 256M ${2:+--speculative-config "$2"} 2>&1 |
    sed -nE 's/^Avg latency: ([0-9.]+) seconds/\1/p'
}
step_ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (b - a) / 32 * 1000}'; }

if [[ $PARTS == *1* ]]; then
echo "== 1. decode, batch 1, 32-token prompt"
declare -A lat
for run in $(seq "$RUNS"); do
  for o in 16 48; do
    l=$(latency "$o")
    lat[$o]+="$l "
    echo "run $run, $o outputs: $l s"
  done
done
a=$(median ${lat[16]}) b=$(median ${lat[48]})
echo "median: $a s (16 outputs), $b s (48 outputs): $(step_ms "$a" "$b") ms per decode step"
fi

if [[ $PARTS == *3* ]]; then
echo "== 3. decode with MTP drafts (k = 3, all rejected on dummy weights) against plain"
MTP='{"method":"qwen3_5_mtp","num_speculative_tokens":3}'
declare -A spec
for run in $(seq "$RUNS"); do
  for mode in plain mtp; do
    cfg=""; [ "$mode" = mtp ] && cfg=$MTP
    a=$(latency 16 "$cfg") b=$(latency 48 "$cfg")
    spec[$mode]+="$(step_ms "$a" "$b") "
    echo "run $run, $mode: $(step_ms "$a" "$b") ms per decode step"
  done
done
echo "median ms per decode step: plain $(median ${spec[plain]}), mtp $(median ${spec[mtp]})"
fi
[[ $PARTS == *2* ]] || exit 0

echo "== 2. shared 512-token prefix + 32 own tokens, 16 outputs, 32 requests, 4 at a time"
declare -A ttft rate
for run in $(seq "$RUNS"); do
  for mode in cached uncached; do
    pc=--enable-prefix-caching
    [ "$mode" = uncached ] && pc=--no-enable-prefix-caching
    "$BIN" serve "$MODEL" --load-format dummy --port "$PORT" -t 2 "$pc" \
      --no-disable-hybrid-kv-cache-manager --max-model-len 1024 --kv-cache-memory 512M \
      --max-num-seqs 8 --tokenizer "$TOK" 2>/dev/null &
    SERVER_PID=$!
    for _ in $(seq 1200); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      sleep 0.25
    done
    t=$("$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name random \
        --tokenizer "$TOK" --random-prefix-len 512 --random-input-len 32 \
        --random-output-len 16 --ignore-eos --num-prompts 32 --max-concurrency 4 \
        --seed "$run" --disable-tqdm 2>&1 | sed -nE 's/^Mean TTFT \(ms\): +([0-9.]+).*/\1/p')
    h=$(metric vllm:prefix_cache_hits_total) q=$(metric vllm:prefix_cache_queries_total)
    r=$(awk -v h="$h" -v q="$q" 'BEGIN {printf "%.3f", (q > 0 ? h / q : 0)}')
    tp_stop_server
    ttft[$mode]+="$t "
    rate[$mode]+="$r "
    echo "run $run, $mode: mean TTFT $t ms, prefix-cache hit rate $r ($h of $q tokens)"
  done
done
echo "median: with checkpoints $(median ${ttft[cached]}) ms TTFT (hit rate" \
  "$(median ${rate[cached]})), without $(median ${ttft[uncached]}) ms"
