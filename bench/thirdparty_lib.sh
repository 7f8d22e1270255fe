# shellcheck shell=bash
# Shared by bench/aisbench.sh, bench/evalscope.sh and bench/guidellm.sh (sourced, not run): a
# virtualenv per tool, `kestrel serve` on a free port (or a running server's --base-url), the HF
# tokenizer directory the tools want (made from the GGUF), and a trap that stops the server by pid.
# bench/serve_vs_vllm.sh uses only the free port and the stop; bench/pd_serve.sh and
# bench/pd_hybrid_transfer.sh the free port and the pid list.
#
# Environment, all optional:
#   KESTREL_BIN        kestrel binary (default build/src/kestrel)
#   MODEL              GGUF or model directory to serve (default: scripts/fetch-default-model.sh)
#   SERVED_MODEL_NAME  name the server answers to and the tools send (default SmolLM2-135M-Instruct)
#   THREADS, MAX_MODEL_LEN   passed to kestrel serve (default 2, 2048)
#   KESTREL_ARGS       more `kestrel serve` flags, word-split
#   PORT               port for the server this script starts (default: a free one)
#   TOKENIZER          HF tokenizer directory to hand the tool (default: made from MODEL's GGUF)
#   RESULTS            where results go (default bench/results/<tool>/<timestamp>)
#   PYTHON             interpreter that creates the virtualenvs (default python3)
# Flags every script takes: --base-url URL (use a running server; nothing is started or stopped),
# --results DIR, -h/--help; anything after `--` goes to the tool itself.

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
KESTREL_BIN=${KESTREL_BIN:-build/src/kestrel}
SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-SmolLM2-135M-Instruct}
THREADS=${THREADS:-2}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-2048}
PYTHON=${PYTHON:-python3}
BASE_URL=
SERVER_PID=
# shellcheck disable=SC2034  # read by the scripts that source this file
TOOL_ARGS=()
# The tools must not try a model hub: everything they need is local.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

tp_usage() {  # prints the calling script's header comment
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

# shellcheck disable=SC2034  # TOOL_ARGS and RESULTS are read by the sourcing scripts
tp_parse_args() {  # tool "$@"
  TOOL=$1
  shift
  while (($#)); do
    case $1 in
      --base-url) BASE_URL=${2:?--base-url needs a URL}; BASE_URL=${BASE_URL%/}; shift 2 ;;
      --base-url=*) BASE_URL=${1#*=}; BASE_URL=${BASE_URL%/}; shift ;;
      --results) RESULTS=${2:?--results needs a directory}; shift 2 ;;
      --results=*) RESULTS=${1#*=}; shift ;;
      -h | --help) tp_usage; exit 0 ;;
      --) shift; TOOL_ARGS=("$@"); break ;;
      *) echo "$0: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
  done
  RESULTS=${RESULTS:-bench/results/$TOOL/$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$RESULTS"
  RESULTS=$(cd "$RESULTS" && pwd)
  MODEL=${MODEL:-$(bash scripts/fetch-default-model.sh)}
}

tp_venv() {  # VENV PIP_SPEC...: creates VENV and installs the specs unless already done
  local venv=$1
  shift
  local stamp="$venv/.kestrel-bench-installed"
  if [[ -x $venv/bin/python && -f $stamp && "$(cat "$stamp")" == "$*" ]]; then
    return 0
  fi
  echo "== installing into $venv: $*" >&2
  [[ -x $venv/bin/python ]] || "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
  echo "$*" >"$stamp"
}

tp_free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

tp_stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  echo "== stopped the server (pid $SERVER_PID)" >&2
  SERVER_PID=
}

tp_start_server() {  # starts `kestrel serve` unless --base-url was given; sets BASE_URL
  if [[ -n $BASE_URL ]]; then
    curl -sf "$BASE_URL/health" >/dev/null || { echo "no server answers at $BASE_URL/health" >&2; exit 1; }
    echo "== using the server at $BASE_URL" >&2
    return 0
  fi
  [[ -x $KESTREL_BIN ]] || { echo "no kestrel binary at $KESTREL_BIN (build it, or set KESTREL_BIN)" >&2; exit 1; }
  local port=${PORT:-$(tp_free_port)}
  trap tp_stop_server EXIT
  trap 'exit 130' INT TERM
  # shellcheck disable=SC2086  # KESTREL_ARGS is a list of flags
  "$KESTREL_BIN" serve "$MODEL" --served-model-name "$SERVED_MODEL_NAME" --host 127.0.0.1 \
    --port "$port" --max-model-len "$MAX_MODEL_LEN" --threads "$THREADS" ${KESTREL_ARGS:-} \
    >"$RESULTS/kestrel-serve.log" 2>&1 &
  SERVER_PID=$!
  BASE_URL=http://127.0.0.1:$port
  echo "== kestrel serve (pid $SERVER_PID) on $BASE_URL, log $RESULTS/kestrel-serve.log" >&2
  for _ in $(seq 600); do
    curl -sf "$BASE_URL/health" >/dev/null 2>&1 && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "kestrel serve exited before it was ready:" >&2
      tail -20 "$RESULTS/kestrel-serve.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "kestrel serve did not become ready in 300 s" >&2
  exit 1
}

tp_tokenizer() {  # VENV: sets TOKENIZER (made from the GGUF once, then reused) and checks it
  local venv=$1
  if [[ -z ${TOKENIZER:-} ]]; then
    [[ $MODEL == *.gguf ]] || { echo "set TOKENIZER=DIR: $MODEL is no GGUF to take one from" >&2; exit 1; }
    TOKENIZER=$PWD/bench/results/tokenizers/$(basename "$MODEL" .gguf)
  fi
  mkdir -p "$(dirname "$TOKENIZER")"
  local rc=0
  "$venv/bin/python" bench/gguf_tokenizer.py "$MODEL" "$TOKENIZER" --check-url "$BASE_URL" \
    --model "$SERVED_MODEL_NAME" >"$RESULTS/tokenizer.log" 2>&1 || rc=$?
  grep -v "PyTorch was not found" "$RESULTS/tokenizer.log" >&2 || true
  if ((rc == 1)) && [[ -f $TOKENIZER/tokenizer.json ]]; then
    echo "WARNING: $TOKENIZER does not tokenize as the server does; the tool's token counts will be off" >&2
  elif ((rc != 0)); then
    echo "could not make a tokenizer directory from $MODEL (set TOKENIZER=DIR)" >&2
    exit 1
  fi
}

tp_host_port() {  # prints "HOST PORT" of BASE_URL
  local hp=${BASE_URL#*://}
  hp=${hp%%/*}
  echo "${hp%:*} ${hp##*:}"
}

# Several background processes (the PD scripts): each one's pid goes into TP_PIDS, tp_stop_all
# stops them all by pid; tp_wait_up URL waits (60 s at most) until it answers.
TP_PIDS=()
tp_stop_all() {
  for pid in "${TP_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${TP_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  TP_PIDS=()
}
tp_wait_up() {
  for _ in $(seq 240); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  echo "not up: $1" >&2
  return 1
}
# `kestrel proxy` (the scripts' $BIN) on PORT in front of one prefill and one decode instance on
# loopback, recorded in TP_PIDS; returns once it answers.
tp_start_proxy() {  # PORT PREFILL_PORT DECODE_PORT
  "$BIN" proxy --host 127.0.0.1 --port "$1" --prefiller-hosts 127.0.0.1 --prefiller-ports "$2" \
    --decoder-hosts 127.0.0.1 --decoder-ports "$3" 2>/dev/null &
  TP_PIDS+=($!)
  tp_wait_up "http://127.0.0.1:$1/healthcheck"
}
