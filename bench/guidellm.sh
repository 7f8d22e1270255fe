#!/usr/bin/env bash
# guidellm (vLLM project's load generator, PyPI `guidellm`) against `kestrel serve`: synthetic
# prompts of PROMPT_TOKENS tokens asking for OUTPUT_TOKENS tokens each, streamed through
# /v1/chat/completions under one load profile; reports TTFT, ITL, TPOT, request latency and
# request/token throughput. Not part of CI.
#   bash bench/guidellm.sh [--base-url http://HOST:PORT] [--results DIR] [-- GUIDELLM_RUN_ARGS...]
# Environment (defaults: a load for 2 CPU cores, about a minute):
#   PROFILE="kind=concurrent,streams=2"   guidellm --profile: kind=synchronous | concurrent,streams=N
#                                         | constant,rate=R | poisson,rate=R | throughput | sweep,sweep_size=N
#   PROMPT_TOKENS=128 OUTPUT_TOKENS=64    synthetic request shape (output length forced with ignore_eos)
#   MAX_REQUESTS=20 MAX_SECONDS=300       stop after that many requests or seconds (per benchmark)
#   REQUEST_FORMAT=/v1/chat/completions   or /v1/completions
#   GUIDELLM_VENV=bench/.venv-guidellm GUIDELLM_SPEC="guidellm==0.8.1"   where and what to install
#   and those of bench/thirdparty_lib.sh (KESTREL_BIN, MODEL, SERVED_MODEL_NAME, THREADS, PORT, ...).
# guidellm needs an HF tokenizer to build prompts of a given token length: it gets one made from
# the GGUF (bench/gguf_tokenizer.py), checked against the server's /tokenize.
# Results: bench/results/guidellm/<timestamp>/ (benchmarks.json/.csv/.html, guidellm.log, server log).
set -euo pipefail
# shellcheck source=SCRIPTDIR/thirdparty_lib.sh
source "$(dirname "$0")/thirdparty_lib.sh"
tp_parse_args guidellm "$@"

VENV=${GUIDELLM_VENV:-bench/.venv-guidellm}
tp_venv "$VENV" "${GUIDELLM_SPEC:-guidellm==0.8.1}" gguf
"$VENV/bin/guidellm" --version >&2

PROFILE=${PROFILE:-kind=concurrent,streams=2}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
MAX_REQUESTS=${MAX_REQUESTS:-20}
MAX_SECONDS=${MAX_SECONDS:-300}
REQUEST_FORMAT=${REQUEST_FORMAT:-/v1/chat/completions}

tp_start_server
tp_tokenizer "$VENV"

"$VENV/bin/guidellm" run \
  --backend "kind=openai_http,target=$BASE_URL,model=$SERVED_MODEL_NAME,request_format=$REQUEST_FORMAT" \
  --tokenizer "kind=hf_auto,model=$TOKENIZER" \
  --data "kind=synthetic_text,prompt_tokens=$PROMPT_TOKENS,output_tokens=$OUTPUT_TOKENS" \
  --profile "$PROFILE" \
  --constraint "kind=max_requests,count=$MAX_REQUESTS" \
  --constraint "kind=max_duration,seconds=$MAX_SECONDS" \
  --output "kind=json,path=$RESULTS/benchmarks.json" \
  --output "kind=csv,path=$RESULTS/benchmarks.csv" \
  --output "kind=html,path=$RESULTS/benchmarks.html" \
  --output kind=console \
  --disable-progress "${TOOL_ARGS[@]}" 2>&1 | tee "$RESULTS/guidellm.log"

"$VENV/bin/python" - "$RESULTS/benchmarks.json" <<'PYEOF'
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    m, s = b["metrics"], b["config"]["strategy"]
    ok = lambda k: m[k]["successful"]
    t = m["request_totals"]
    print(f"guidellm {s['type_']}{'@' + str(s.get('streams') or s.get('rate') or '') if s.get('streams') or s.get('rate') else ''}: "
          f"{t['successful']} ok / {t['errored']} errors, {ok('requests_per_second')['mean']:.2f} req/s, "
          f"{m['output_tokens_per_second']['total']['mean']:.1f} output tok/s, "
          f"TTFT median {ok('time_to_first_token_ms')['median']:.0f} ms "
          f"(p99 {ok('time_to_first_token_ms')['percentiles']['p99']:.0f}), "
          f"ITL median {ok('inter_token_latency_ms')['median']:.1f} ms, "
          f"latency median {ok('request_latency')['median']:.2f} s")
PYEOF
echo "== results in $RESULTS" >&2
