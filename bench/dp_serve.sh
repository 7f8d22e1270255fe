#!/usr/bin/env bash
# Issue 20's DP target: `kestrel bench serve` output throughput of a server with
# --data-parallel-size 2 (two engines, one compute thread each) against --data-parallel-size 1
# (one engine, two threads), on this machine's two cores, default model (Q4_1), random 128-token
# prompts and 128 outputs, 32 concurrent requests; alternating, several runs; prints each run and
# the medians (DP 2 / DP 1).
#   bash bench/dp_serve.sh [RUNS] [BIN]   (default: 3 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
BIN=${2:-build/src/kestrel}
MODEL=$(bash scripts/fetch-default-model.sh)
source bench/thirdparty_lib.sh
PORT=$(tp_free_port)
trap tp_stop_server EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A tput
for run in $(seq "$RUNS"); do
  for dp in 1 2; do
    "$BIN" serve "$MODEL" --port "$PORT" -t 2 --data-parallel-size "$dp" --max-model-len 2048 \
      --kv-cache-memory 1G --max-num-seqs 32 2>/dev/null &
    SERVER_PID=$!
    for _ in $(seq 240); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      sleep 0.25
    done
    o=$("$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name random \
        --random-input-len 128 --random-output-len 128 --ignore-eos --num-prompts 96 \
        --max-concurrency 32 --seed "$run" --disable-tqdm 2>&1 |
        sed -nE 's/^Output token throughput \(tok\/s\): +([0-9.]+).*/\1/p')
    tp_stop_server
    tput[$dp]+="$o "
    echo "run $run, DP $dp: $o output tok/s"
  done
done
m1=$(median ${tput[1]})
m2=$(median ${tput[2]})
echo "median: DP 1 $m1, DP 2 $m2 output tok/s; DP 2 / DP 1 = $(awk -v a="$m2" -v b="$m1" 'BEGIN {printf "%.2f", a / b}')"
