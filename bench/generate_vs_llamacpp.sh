#!/usr/bin/env bash
# Kestrel `generate` beside llama.cpp (llama-cpp-python) on one GGUF, same thread count,
# alternating runs; prints each run and the medians.
#   bash bench/generate_vs_llamacpp.sh [MODEL.gguf] [THREADS] [RUNS]
# Needs `pip install llama-cpp-python` (builds llama.cpp from source; not part of CI).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$(bash scripts/fetch-default-model.sh)}
THREADS=${2:-2}
RUNS=${3:-5}
# 128 prompt tokens; 129 generated = the first from the prompt pass + 128 decode steps.
IDS=$(python3 -c "import random; random.seed(0); print(','.join(str(random.randrange(100, 49000)) for _ in range(128)))")
kpp=(); ktg=(); lpp=(); ltg=()
for i in $(seq "$RUNS"); do
  line=$(build/src/kestrel generate -m "$MODEL" --prompt-ids "$IDS" -n 129 --temperature 0 \
         --ignore-eos --print-ids -t "$THREADS" 2>&1 >/dev/null | tail -n 1)
  echo "kestrel:   $line"
  kpp+=("$(sed -E 's/.*prompt: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/' <<<"$line")")
  ktg+=("$(sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/' <<<"$line")")
  json=$(python3 bench/llamacpp_reference.py --model "$MODEL" --threads "$THREADS" 2>/dev/null)
  echo "llama.cpp: $json"
  lpp+=("$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['pp128_tok_s'])" "$json")")
  ltg+=("$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['tg128_tok_s'])" "$json")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "median pp128 tok/s: kestrel $(median "${kpp[@]}")  llama.cpp $(median "${lpp[@]}")"
echo "median tg128 tok/s: kestrel $(median "${ktg[@]}")  llama.cpp $(median "${ltg[@]}")"
