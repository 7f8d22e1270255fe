#!/usr/bin/env bash
# Prompt processing (pp512) and single-stream decode (tg128) of Kestrel and llama.cpp's
# llama-bench on the default model's Q4_1 file and on Q8_0 and F16 versions of it (made with
# llama-quantize), same threads, alternating engines, several runs; prints each run and medians.
# A TYPES entry that is a .gguf path benchmarks that file as it is (e.g. Gemma3-270M from
# scripts/fetch-gemma3.sh).
#   bash bench/cpu_vs_llamacpp.sh [THREADS] [RUNS] ["TYPES"]
# On AVX2 side by side: KESTREL_CPU_ISA=avx2 LLAMA_ISA=avx2 bash bench/cpu_vs_llamacpp.sh …
# (and KESTREL_CPU_ISA=avxvnni LLAMA_ISA=avxvnni for AVX2 CPUs with AVX-VNNI)
# (LLAMA_ISA=avx2: llama.cpp built without AVX-512, bench/build_llamacpp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
RUNS=${2:-3}
TYPES=${3:-"Q4_1 Q8_0 F16"}
LLAMA_BIN=$(bash bench/build_llamacpp.sh)
Q41=$(bash scripts/fetch-default-model.sh)
DIR=$(dirname "$Q41")
model_for() {
  if [[ $1 == *.gguf ]]; then
    echo "$1"
    return
  fi
  local f="$DIR/SmolLM2-135M-Instruct.$1.gguf"
  if [[ ! -s $f ]]; then
    "$LLAMA_BIN/llama-quantize" --allow-requantize "$Q41" "$f" "$1" >/dev/null 2>&1
  fi
  echo "$f"
}
ids() {
  python3 -c "import random; random.seed($1); print(','.join(str(random.randrange(100, 49000)) for _ in range($2)))"
}
PP_IDS=$(ids 0 512)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { sed -E "s/.*$1: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/" <<<"$2"; }

for type in $TYPES; do
  model=$(model_for "$type")
  type=$(basename "$type")
  kpp=(); ktg=(); lpp=(); ltg=()
  for _ in $(seq "$RUNS"); do
    # pp512: one 512-token prompt in one step. tg128: 128 decode steps after a 1-token prompt.
    pp=$(build/src/kestrel generate -m "$model" --prompt-ids "$PP_IDS" -n 1 --temperature 0 \
         --ignore-eos --print-ids -t "$THREADS" 2>&1 >/dev/null | tail -n 1)
    tg=$(build/src/kestrel generate -m "$model" --prompt-ids 1 -n 129 --temperature 0 \
         --ignore-eos --print-ids -t "$THREADS" 2>&1 >/dev/null | tail -n 1)
    kpp+=("$(field prompt "$pp")")
    ktg+=("$(field decode "$tg")")
    json=$("$LLAMA_BIN/llama-bench" -m "$model" -p 512 -n 128 -t "$THREADS" -r 1 -o json 2>/dev/null)
    read -r lp lt < <(python3 -c "
import json, sys
rows = json.loads(sys.argv[1])
pp = next(r['avg_ts'] for r in rows if r['n_prompt'] > 0)
tg = next(r['avg_ts'] for r in rows if r['n_gen'] > 0)
print(pp, tg)" "$json")
    lpp+=("$lp"); ltg+=("$lt")
    echo "$type run: kestrel pp512 ${kpp[-1]} tg128 ${ktg[-1]} | llama.cpp pp512 $lp tg128 $lt"
  done
  echo "$type median pp512 tok/s: kestrel $(median "${kpp[@]}")  llama.cpp $(median "${lpp[@]}")"
  echo "$type median tg128 tok/s: kestrel $(median "${ktg[@]}")  llama.cpp $(median "${ltg[@]}")"
done
