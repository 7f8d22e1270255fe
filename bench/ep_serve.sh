#!/usr/bin/env bash
# Issue 20's expert parallelism across data-parallel engines: `kestrel bench serve` output
# throughput and the server's resident memory with --data-parallel-size 2 (each engine holds every
# expert: two copies) against --data-parallel-size 2 --enable-expert-parallel (the experts spread
# over both engines, routed rows exchanged every MoE layer, the engines in lockstep), on a
# Qwen3-MoE shape with dummy weights (bench/configs/qwen3_moe_4layer: 4 layers, 64 experts of
# 768 features, top-8, bf16), one compute thread per engine on this machine's two cores, random
# 64-token prompts and 64 outputs, 16 concurrent requests; alternating, several runs; prints each
# run and the medians.
#   bash bench/ep_serve.sh [RUNS] [BIN]   (default: 2 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
BIN=${2:-build/src/kestrel}
MODEL=bench/configs/qwen3_moe_4layer
source bench/thirdparty_lib.sh
PORT=$(tp_free_port)
trap tp_stop_server EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A tput rss
for run in $(seq "$RUNS"); do
  for mode in dp ep; do
    flags=(--data-parallel-size 2)
    [ "$mode" = ep ] && flags+=(--enable-expert-parallel)
    "$BIN" serve "$MODEL" --load-format dummy --port "$PORT" -t 2 "${flags[@]}" \
      --max-model-len 1024 --kv-cache-memory 256M --max-num-seqs 16 --tokenizer \
      "$(bash scripts/fetch-default-model.sh)" 2>/dev/null &
    SERVER_PID=$!
    for _ in $(seq 1200); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      sleep 0.25
    done
    o=$("$BIN" bench serve --base-url "http://127.0.0.1:$PORT" --dataset-name random \
        --tokenizer "$(bash scripts/fetch-default-model.sh)" --random-input-len 64 \
        --random-output-len 64 --ignore-eos --num-prompts 48 --max-concurrency 16 --seed "$run" \
        --disable-tqdm 2>&1 | sed -nE 's/^Output token throughput \(tok\/s\): +([0-9.]+).*/\1/p')
    m=$(awk '/VmRSS/ {printf "%.2f", $2 / 1048576}' "/proc/$SERVER_PID/status")
    tp_stop_server
    tput[$mode]+="$o "
    rss[$mode]+="$m "
    echo "run $run, $mode: $o output tok/s, server RSS $m GiB"
  done
done
echo "median: DP 2 $(median ${tput[dp]}) tok/s ($(median ${rss[dp]}) GiB), DP 2 + EP" \
  "$(median ${tput[ep]}) tok/s ($(median ${rss[ep]}) GiB)"
