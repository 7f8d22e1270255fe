#!/usr/bin/env bash
# AISBench (Huawei's ais_bench_benchmark, PyPI `ais-bench-benchmark`, CLI `ais_bench`) against
# `kestrel serve`, through its vLLM OpenAI-API chat model (VLLMCustomAPIChat):
#   perf: NUM_PROMPTS random token-id prompts of INPUT_LEN tokens (its `synthetic` tokenid
#         dataset), OUTPUT_LEN tokens each (ignore_eos), streamed, CONCURRENCY at a time: E2EL,
#         TTFT, TPOT, ITL, request/token throughput (`ais_bench --mode perf`).
#   acc:  AISBench's GSM8K task (0-shot chat prompt, GSM8K loader, postprocessor, evaluator) on
#         bench/aisbench/gsm8k_mini: 30 grade-school questions written for this script, not the
#         real GSM8K (no dataset can be fetched here); GSM8K_DIR=DIR runs it on a real gsm8k/
#         directory (test.jsonl, train.jsonl). Greedy, up to ACC_OUTPUT_LEN tokens: accuracy in %.
# Not part of CI.
#   bash bench/aisbench.sh [perf|acc|all] [--base-url http://HOST:PORT] [--results DIR] [-- AIS_BENCH_ARGS...]
# Environment (defaults: a load for 2 CPU cores, a minute or two for `all`):
#   NUM_PROMPTS=20 INPUT_LEN=128 OUTPUT_LEN=64 CONCURRENCY=2 REQUEST_RATE=0 (0: no pacing)
#   ACC_OUTPUT_LEN=256 NUM_QUESTIONS= (default: all of the dataset's test split) GSM8K_DIR=
#   AISBENCH_VENV=bench/.venv-aisbench AISBENCH_SPEC="ais-bench-benchmark==3.1.20260630"
#   and those of bench/thirdparty_lib.sh (KESTREL_BIN, MODEL, SERVED_MODEL_NAME, THREADS, PORT, ...).
# Install: pins pyarrow<21. ais-bench-benchmark pins numpy<2, and its datasets<=3.6.0 takes any
# pyarrow>=15, so pip picks the newest pyarrow (26.x), whose import fails with "pyarrow requires
# NumPy 2.0 or newer, found 1.26.4": `ais_bench` dies at `import datasets`. pyarrow 21 removed
# pa.PyExtensionType, which the datasets 2.12-2.13 that ais_bench also allows subclass.
# Tokenizer: AISBench's perf summarizer and tokenid dataset load the model config's `path` as an
# HF tokenizer; it gets one made from the GGUF (bench/gguf_tokenizer.py), checked against /tokenize.
# Results: bench/results/aisbench/<timestamp>/{perf,acc}/<run>/ (performances/, summary/, logs/).
set -euo pipefail
WHAT=all
case ${1:-} in perf | acc | all) WHAT=$1; shift ;; esac
# shellcheck source=SCRIPTDIR/thirdparty_lib.sh
source "$(dirname "$0")/thirdparty_lib.sh"
tp_parse_args aisbench "$@"

VENV=${AISBENCH_VENV:-bench/.venv-aisbench}
tp_venv "$VENV" "${AISBENCH_SPEC:-ais-bench-benchmark==3.1.20260630}" "pyarrow<21" gguf
"$VENV/bin/python" -m pip show ais-bench-benchmark 2>/dev/null | sed -n 's/^Version: /ais_bench_benchmark /p' >&2

NUM_PROMPTS=${NUM_PROMPTS:-20}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-64}
CONCURRENCY=${CONCURRENCY:-2}
REQUEST_RATE=${REQUEST_RATE:-0}
ACC_OUTPUT_LEN=${ACC_OUTPUT_LEN:-256}
GSM8K_DIR=$(cd "${GSM8K_DIR:-bench/aisbench/gsm8k_mini}" && pwd)

tp_start_server
tp_tokenizer "$VENV"

# The configs under bench/aisbench are templates: fill in the @NAME@ fields (AISBench's config
# loader runs them in mmengine's lazy-import mode, where they cannot read the environment).
CFG=$RESULTS/configs
mkdir -p "$CFG/models" "$CFG/datasets"
for f in bench/aisbench/models/*.py bench/aisbench/datasets/*.py; do
  sed -e "s|@TOKENIZER@|$TOKENIZER|g; s|@MODEL@|$SERVED_MODEL_NAME|g; s|@BASE_URL@|$BASE_URL|g" \
    -e "s|@REQUEST_RATE@|$REQUEST_RATE|g; s|@OUTPUT_LEN@|$OUTPUT_LEN|g; s|@CONCURRENCY@|$CONCURRENCY|g" \
    -e "s|@ACC_OUTPUT_LEN@|$ACC_OUTPUT_LEN|g; s|@NUM_PROMPTS@|$NUM_PROMPTS|g; s|@INPUT_LEN@|$INPUT_LEN|g" \
    -e "s|@GSM8K_DIR@|$GSM8K_DIR|g" "$f" >"$CFG/$(basename "$(dirname "$f")")/$(basename "$f")"
done

if [[ $WHAT == perf || $WHAT == all ]]; then
  "$VENV/bin/ais_bench" --config-dir "$CFG" --models kestrel_stream_chat --datasets kestrel_synthetic \
    --mode perf -w "$RESULTS/perf" "${TOOL_ARGS[@]}" 2>&1 | tee "$RESULTS/perf.log"
fi
if [[ $WHAT == acc || $WHAT == all ]]; then
  "$VENV/bin/ais_bench" --config-dir "$CFG" --models kestrel_chat --datasets kestrel_gsm8k_mini \
    --mode all -w "$RESULTS/acc" ${NUM_QUESTIONS:+--num-prompts "$NUM_QUESTIONS"} "${TOOL_ARGS[@]}" \
    2>&1 | tee "$RESULTS/acc.log"
fi

"$VENV/bin/python" - "$RESULTS" <<'PYEOF'
import csv, glob, json, os, sys
root = sys.argv[1]
for f in sorted(glob.glob(os.path.join(root, "perf", "*", "performances", "*", "*.json"))):
    common = {k: v["total"] for k, v in json.load(open(f)).items()}
    rows = {r["Performance Parameters"]: r for r in csv.DictReader(open(f[:-5] + ".csv"))}
    print(f"aisbench perf: {common['Success Requests']} ok / {common['Failed Requests']} failed, "
          f"{common['Request Throughput']}, output {common['Output Token Throughput']}, "
          f"total {common['Total Token Throughput']}; E2EL avg {rows['E2EL']['Average']}, "
          f"TPOT avg {rows['TPOT']['Average']}, TTFT avg {rows['TTFT']['Average']} "
          "(time to the first SSE chunk)")
for f in sorted(glob.glob(os.path.join(root, "acc", "*", "summary", "summary_*.csv"))):
    for r in csv.DictReader(open(f)):
        model = [k for k in r if k not in ("dataset", "version", "metric", "mode")][0]
        print(f"aisbench acc: {r['dataset']} {r['metric']} {r[model]}")
PYEOF
echo "== results in $RESULTS" >&2
