#!/usr/bin/env bash
# `kestrel bench serve` against Kestrel and against llama.cpp's own llama-server on the same GGUF,
# same thread count, one server at a time, alternating per concurrency level. llama-server gets
# as many parallel slots as the concurrency with continuous batching on (its strongest setting).
#   bash bench/serve_vs_llamacpp.sh [MODEL.gguf] [THREADS] ["CONCURRENCIES"] [NUM_PROMPTS]
# Results: bench/results/serve_vs_llamacpp/<engine>-c<N>.json, then a `bench compare` table.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$(bash scripts/fetch-default-model.sh)}
THREADS=${2:-2}
CONCURRENCIES=${3:-"1 8 32"}
NUM_PROMPTS=${4:-200}
IN=256
OUT=128
LLAMA_BIN=$(bash bench/build_llamacpp.sh)
RESULTS=bench/results/serve_vs_llamacpp
mkdir -p "$RESULTS"
PORT=18765
SERVER_PID=

wait_ready() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "server did not become ready" >&2
  return 1
}
stop_server() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
trap stop_server EXIT

run_bench() {  # engine concurrency
  # The same prompts for both engines: built with the GGUF's tokenizer, fixed seed.
  build/src/kestrel bench serve --base-url "http://127.0.0.1:$PORT" --model SmolLM2 \
    --tokenizer "$MODEL" --dataset-name random --random-input-len $IN --random-output-len $OUT \
    --num-prompts "$NUM_PROMPTS" --max-concurrency "$2" --seed 0 --disable-tqdm \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --label "$1" \
    --save-result --result-dir "$RESULTS" --result-filename "$1-c$2.json"
}

for c in $CONCURRENCIES; do
  build/src/kestrel serve "$MODEL" --served-model-name SmolLM2 --port $PORT -t "$THREADS" \
    --max-num-seqs "$c" 2>"$RESULTS/kestrel-c$c.log" &
  SERVER_PID=$!
  wait_ready
  run_bench kestrel "$c"
  stop_server

  # One slot per concurrent request, each with room for a whole request.
  "$LLAMA_BIN/llama-server" -m "$MODEL" --alias SmolLM2 --port $PORT -t "$THREADS" -tb "$THREADS" \
    --parallel "$c" --cont-batching -c $((c * (IN + OUT + 64))) --no-webui \
    2>"$RESULTS/llamacpp-c$c.log" &
  SERVER_PID=$!
  wait_ready
  run_bench llamacpp "$c"
  stop_server
done

files=()
for c in $CONCURRENCIES; do files+=("$RESULTS/kestrel-c$c.json" "$RESULTS/llamacpp-c$c.json"); done
build/src/kestrel bench compare "${files[@]}" --html "$RESULTS/report.html"
