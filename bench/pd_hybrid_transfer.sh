#!/usr/bin/env bash
# Issue 22's PD transfer of a hybrid model: what one request's KV load moves and how fast, over
# TCP and over UCX, on the Qwen3.5-MoE shape with dummy weights (bench/configs/qwen3_5_moe_4layer:
# three Gated DeltaNet layers, whose state slot goes with the one attention layer's blocks). One
# prefill instance (core 0) and one decode instance (core 1) behind `kestrel proxy`; `kestrel
# bench serve` sends 16 random 512-token prompts one at a time (4 outputs). From the decode's
# /metrics: loads, bytes per load (blocks + state), mean load time, and the rate.
#   bash bench/pd_hybrid_transfer.sh [RUNS] [BIN]   (default: 2 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
BIN=${2:-build/src/kestrel}
MODEL=bench/configs/qwen3_5_moe_4layer
TOK=$(bash scripts/fetch-default-model.sh)  # its 49152-token vocabulary is the config's
source bench/thirdparty_lib.sh
trap tp_stop_all EXIT
metric() {  # PORT NAME
  curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 ~ "^"m {s += $2} END {print s + 0}'
}
COMMON=(--load-format dummy --tokenizer "$TOK" --max-model-len 1024 --kv-cache-memory 512M
  --max-num-seqs 4)
kv() {  # ROLE TRANSPORT
  echo "{\"kv_connector\":\"MooncakeConnectorV1\",\"kv_role\":\"$1\",\"kv_port\":\"$(tp_free_port)\",\"kv_connector_extra_config\":{\"kv_transport\":\"$2\"}}"
}
for run in $(seq "$RUNS"); do
  for transport in tcp ucx; do
    pp=$(tp_free_port) dp=$(tp_free_port) port=$(tp_free_port)
    taskset -c 0 "$BIN" serve "$MODEL" --port "$pp" -t 1 "${COMMON[@]}" \
      --kv-transfer-config "$(kv kv_producer "$transport")" 2>/dev/null &
    TP_PIDS+=($!)
    taskset -c 1 "$BIN" serve "$MODEL" --port "$dp" -t 1 "${COMMON[@]}" \
      --kv-transfer-config "$(kv kv_consumer "$transport")" 2>/dev/null &
    TP_PIDS+=($!)
    tp_wait_up "http://127.0.0.1:$pp/health"
    tp_wait_up "http://127.0.0.1:$dp/health"
    tp_start_proxy "$port" "$pp" "$dp"
    out=$("$BIN" bench serve --base-url "http://127.0.0.1:$port" --model "$MODEL" \
      --tokenizer "$TOK" --dataset-name random --random-input-len 512 --random-output-len 4 \
      --ignore-eos --num-prompts 16 --max-concurrency 1 --seed "$run" --disable-tqdm 2>&1)
    grep -q "Successful requests: *16" <<<"$out" || { echo "$out"; exit 1; }
    loads=$(metric "$dp" kestrel:kv_transfer_loads_total)
    bytes=$(metric "$dp" kestrel:kv_transfer_bytes_total)
    ucx=$(metric "$dp" kestrel:kv_transfer_ucx_bytes_total)
    secs=$(metric "$dp" kestrel:kv_transfer_load_seconds_sum)
    tp_stop_all
    awk -v t="$transport" -v r="$run" -v n="$loads" -v b="$bytes" -v u="$ucx" -v s="$secs" \
      'BEGIN {printf "run %s, %s: %d loads, %.2f MB per load (%.0f%% over UCX), %.2f ms per load, %.2f GB/s\n",
              r, t, n, b / n / 1e6, 100 * u / b, s / n * 1000, b / s / 1e9}'
  done
done
