#!/usr/bin/env bash
# Issue 20's TP target: single-stream decode of the default model with --tensor-parallel-size 2
# (two processes, one compute thread each) against TP 1 (one process, two threads), both on
# this machine's two cores: `kestrel bench latency`, 32-token prompt, 128 outputs, batch 1,
# alternating TP 1 and TP 2, several runs; prints each run and the medians of the average
# latencies and their ratio (TP 1 latency / TP 2 latency = TP 2's relative speed).
#   bash bench/tp_decode.sh [RUNS] [BIN]   (default: 5 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BIN=${2:-build/src/kestrel}
MODEL=$(bash scripts/fetch-default-model.sh)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A lat
for run in $(seq "$RUNS"); do
  for tp in 1 2; do
    s=$("$BIN" bench latency -m "$MODEL" --threads 2 --tensor-parallel-size "$tp" --input-len 32 \
        --output-len 128 --batch-size 1 --num-iters-warmup 1 --num-iters 3 \
        --kv-cache-memory 256M --log-level warning 2>/dev/null |
        sed -nE 's/^Avg latency: ([0-9.]+) seconds.*/\1/p')
    lat[$tp]+="$s "
    echo "run $run, TP $tp: $s s per 128 tokens"
  done
done
m1=$(median ${lat[1]})
m2=$(median ${lat[2]})
echo "median: TP 1 $m1 s, TP 2 $m2 s; TP 2 runs at $(awk -v a="$m1" -v b="$m2" 'BEGIN {printf "%.2f", a / b}')x TP 1's speed"
