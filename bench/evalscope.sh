#!/usr/bin/env bash
# evalscope perf (ModelScope's serving stress test, PyPI `evalscope[perf]`) against
# `kestrel serve`: its `random` dataset (prompts of PROMPT_TOKENS random tokens, chat template
# applied) streamed through /v1/chat/completions at each concurrency in PARALLEL; reports
# latency, TTFT, TPOT, ITL, request and token throughput, prefix-cache hit rate (from usage).
# Not part of CI.
#   bash bench/evalscope.sh [--base-url http://HOST:PORT] [--results DIR] [-- EVALSCOPE_PERF_ARGS...]
# Environment (defaults: a load for 2 CPU cores, well under a minute):
#   PARALLEL="2" NUMBER="20"            concurrency levels and requests per level (lists of equal length)
#   PROMPT_TOKENS=128 OUTPUT_TOKENS=64  request shape (output forced with min_tokens = max_tokens)
#   EVALSCOPE_VENV=bench/.venv-evalscope EVALSCOPE_SPEC="evalscope[perf]==1.14.1"
#   and those of bench/thirdparty_lib.sh (KESTREL_BIN, MODEL, SERVED_MODEL_NAME, THREADS, PORT, ...).
# The random dataset needs an HF tokenizer (evalscope asserts --tokenizer-path): it gets one made
# from the GGUF (bench/gguf_tokenizer.py, without torch here), checked against /tokenize. Token
# counts come from the responses' usage.
# Results: bench/results/evalscope/<timestamp>/ (<model>/parallel_*/benchmark_summary.json,
# perf_report.html, evalscope.log, server log).
set -euo pipefail
# shellcheck source=SCRIPTDIR/thirdparty_lib.sh
source "$(dirname "$0")/thirdparty_lib.sh"
tp_parse_args evalscope "$@"

VENV=${EVALSCOPE_VENV:-bench/.venv-evalscope}
tp_venv "$VENV" "${EVALSCOPE_SPEC:-evalscope[perf]==1.14.1}" gguf
"$VENV/bin/evalscope" --version >&2

read -r -a PARALLEL <<<"${PARALLEL:-2}"
read -r -a NUMBER <<<"${NUMBER:-20}"
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}

tp_start_server
tp_tokenizer "$VENV"

"$VENV/bin/evalscope" perf \
  --url "$BASE_URL/v1/chat/completions" --api openai --model "$SERVED_MODEL_NAME" \
  --tokenizer-path "$TOKENIZER" --dataset random \
  --min-prompt-length "$PROMPT_TOKENS" --max-prompt-length "$PROMPT_TOKENS" --prefix-length 0 \
  --max-tokens "$OUTPUT_TOKENS" --min-tokens "$OUTPUT_TOKENS" \
  --parallel "${PARALLEL[@]}" --number "${NUMBER[@]}" --stream --seed 0 \
  --outputs-dir "$RESULTS" --no-timestamp "${TOOL_ARGS[@]}" 2>&1 | tee "$RESULTS/evalscope.log"

"$VENV/bin/python" - "$RESULTS" <<'PYEOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "parallel_*", "benchmark_summary.json"))):
    s = json.load(open(f))
    print(f"evalscope parallel={s['Concurrency']}: {s['Success Requests']} ok / {s['Failed Requests']} failed, "
          f"{s['Req Throughput (req/s)']:.2f} req/s, {s['Output Throughput (tok/s)']:.1f} output tok/s, "
          f"TTFT avg {s['Avg TTFT (ms)']:.0f} ms, TPOT avg {s['Avg TPOT (ms)']:.1f} ms, "
          f"latency avg {s['Avg Latency (s)']:.2f} s, prefix-cache hits {s.get('KV Cache Hit Rate (%)', 0)}%")
PYEOF
echo "== results in $RESULTS" >&2
