#!/usr/bin/env bash
# Issue 21's PD comparison: `kestrel bench serve` through `kestrel proxy` in front of one prefill
# instance (core 0, one compute thread) and one decode instance (core 1, one thread), against one
# colocated server with both cores (two threads); default model (Q4_1), random 512-token prompts
# and 64 outputs, 8 concurrent requests. Alternating, several runs; prints each run's mean TTFT,
# mean TPOT and output throughput, then the medians side by side.
#   bash bench/pd_serve.sh [RUNS] [BIN]   (default: 3 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
BIN=${2:-build/src/kestrel}
MODEL=$(bash scripts/fetch-default-model.sh)
source bench/thirdparty_lib.sh
trap tp_stop_all EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
COMMON=(--max-model-len 2048 --kv-cache-memory 1G --max-num-seqs 16)
bench() {  # PORT SEED
  "$BIN" bench serve --base-url "http://127.0.0.1:$1" --model "$MODEL" --dataset-name random \
    --random-input-len 512 --random-output-len 64 --ignore-eos --num-prompts 48 \
    --max-concurrency 8 --seed "$2" --disable-tqdm 2>&1
}
field() {  # OUTPUT LABEL
  sed -nE "s#^$2 +([0-9.]+).*#\1#p" <<<"$1"
}
declare -A ttft tpot tput
for run in $(seq "$RUNS"); do
  for mode in colocated pd; do
    if [[ $mode == colocated ]]; then
      port=$(tp_free_port)
      taskset -c 0,1 "$BIN" serve "$MODEL" --port "$port" -t 2 "${COMMON[@]}" 2>/dev/null &
      TP_PIDS+=($!)
      tp_wait_up "http://127.0.0.1:$port/health"
    else
      pp=$(tp_free_port) dp=$(tp_free_port) port=$(tp_free_port)
      taskset -c 0 "$BIN" serve "$MODEL" --port "$pp" -t 1 "${COMMON[@]}" --kv-transfer-config \
        "{\"kv_connector\":\"MooncakeConnectorV1\",\"kv_role\":\"kv_producer\",\"kv_port\":\"$(tp_free_port)\"}" \
        2>/dev/null &
      TP_PIDS+=($!)
      taskset -c 1 "$BIN" serve "$MODEL" --port "$dp" -t 1 "${COMMON[@]}" --kv-transfer-config \
        "{\"kv_connector\":\"MooncakeConnectorV1\",\"kv_role\":\"kv_consumer\",\"kv_port\":\"$(tp_free_port)\"}" \
        2>/dev/null &
      TP_PIDS+=($!)
      tp_wait_up "http://127.0.0.1:$pp/health"
      tp_wait_up "http://127.0.0.1:$dp/health"
      tp_start_proxy "$port" "$pp" "$dp"
    fi
    out=$(bench "$port" "$run")
    tp_stop_all
    grep -q "Successful requests: *48" <<<"$out" || { echo "$out"; exit 1; }
    a=$(field "$out" "Mean TTFT \(ms\):") b=$(field "$out" "Mean TPOT \(ms\):")
    c=$(field "$out" "Output token throughput \(tok/s\):")
    ttft[$mode]+="$a " tpot[$mode]+="$b " tput[$mode]+="$c "
    echo "run $run, $mode: mean TTFT $a ms, mean TPOT $b ms, output $c tok/s"
  done
done
for mode in colocated pd; do
  echo "median $mode: mean TTFT $(median ${ttft[$mode]}) ms, mean TPOT $(median ${tpot[$mode]}) ms, output $(median ${tput[$mode]}) tok/s"
done
