#!/usr/bin/env bash
# lm-eval (PyPI `lm-eval[api]`, pulls torch; not part of CI) against `kestrel serve` on the default
# model, through the `local-completions` backend, on a tiny generate-until task read from a local
# file. Usage: bash tools/lm_eval_smoke/run.sh [model.gguf]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
model=${1:-$(bash "$repo/scripts/fetch-default-model.sh")}
port=${PORT:-$(python3 -c "import socket; s=socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])")}
"$repo/build/src/kestrel" serve "$model" --served-model-name smollm2 --port "$port" \
  --max-model-len 2048 --log-level warning &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  kill -0 $server 2>/dev/null || { echo "kestrel serve exited" >&2; exit 1; }
  curl -sf "localhost:$port/health" >/dev/null && break
  sleep 1
done
cd "$here"
lm_eval --model local-completions \
  --model_args "model=smollm2,base_url=http://localhost:$port/v1/completions,tokenized_requests=False,tokenizer_backend=None,num_concurrent=4,max_retries=1" \
  --include_path "$here" --tasks kestrel_capitals --output_path "${OUT:-/tmp/lm_eval_kestrel}" \
  --log_samples
