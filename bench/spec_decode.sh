#!/usr/bin/env bash
# Issue 19's speculative decoding figures, each side by side with plain decoding in the same
# minutes (alternating, RUNS rounds, medians):
#   1. n-gram drafting on the default model, single stream, greedy, on three high-overlap chat
#      prompts (bench/prompts: quoting a paragraph, fixing a typo in code, rewriting a list):
#      decode tok/s and the acceptance summary `kestrel generate` prints;
#   2. the default model's Q4_1 file drafting for its F16 file (same tokenizer), single stream;
#   3. MTP on bench/configs/deepseek_v3_4layer_mtp with dummy weights: the cost of a decode step
#      with k = 1 and 3 against a plain one (random weights accept almost nothing, so every step
#      is one verify: (latency at 33 outputs − latency at 1) / 32);
#   4. 32 concurrent sequences (bench throughput, 128 in / 128 out) with and without drafts.
#   bash bench/spec_decode.sh [RUNS]   (default 3; build/src/kestrel; PARTS=13 runs parts 1 and 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
BIN=build/src/kestrel
Q41=$(bash scripts/fetch-default-model.sh)
F16=${Q41%.Q4_1.gguf}.F16.gguf
[[ -f $F16 ]] || { echo "missing $F16 (bench/cpu_vs_llamacpp.sh makes it with llama-quantize)"; exit 1; }
MTP_CFG=bench/configs/deepseek_v3_4layer_mtp
PARTS=${PARTS:-1234}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
decode_rate() { sed -nE 's/.*decode: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/p'; }
NGRAM='{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_min":2,"prompt_lookup_max":5}'
DRAFT="{\"method\":\"draft_model\",\"model\":\"$Q41\",\"num_speculative_tokens\":3}"

gen() {  # model prompt-file [spec] → "rate|acceptance line"
  local out
  out=$("$BIN" generate -m "$1" -p "$(cat "$2")" -n 96 --temperature 0 -t 2 --log-level warning \
        ${3:+--speculative-config "$3"} 2>&1 >/dev/null)
  echo "$(echo "$out" | decode_rate)|$(echo "$out" | sed -n 's/^speculative: //p')"
}

race() {  # model prompt-file spec: plain and drafted runs alternating, medians
  local plain=() spec=() acc="" r mp ms
  for _ in $(seq "$RUNS"); do
    plain+=("$(gen "$1" "$2" | cut -d'|' -f1)")
    r=$(gen "$1" "$2" "$3"); spec+=("${r%%|*}"); acc=${r#*|}
  done
  mp=$(median "${plain[@]}"); ms=$(median "${spec[@]}")
  echo "$(basename "$2" .txt): plain $mp tok/s, drafted $ms tok/s ($(ratio "$ms" "$mp")x) | $acc"
}

if [[ $PARTS == *1* ]]; then
echo "== 1. n-gram, default model (Q4_1), single stream: $NGRAM"
for p in bench/prompts/*.txt; do race "$Q41" "$p" "$NGRAM"; done

fi
if [[ $PARTS == *2* ]]; then
echo "== 2. draft model: Q4_1 drafts for F16, single stream: $DRAFT"
for p in bench/prompts/quote_paragraph.txt bench/prompts/fix_typo_code.txt; do
  race "$F16" "$p" "$DRAFT"
done

fi
if [[ $PARTS == *3* ]]; then
echo "== 3. MTP verify step, $MTP_CFG (dummy weights), batch 1, 32-token prompt"
lat() {  # output-len [spec] → avg latency (s)
  "$BIN" bench latency -m "$MTP_CFG" --load-format dummy --input-len 32 --output-len "$1" \
    --batch-size 1 --num-iters "$RUNS" --num-iters-warmup 1 -t 2 --log-level warning \
    ${2:+--speculative-config "$2"} 2>&1 | sed -nE 's/^Avg latency: ([0-9.]+) seconds/\1/p'
}
base=""
for k in 0 1 3; do
  spec=""; [[ $k == 0 ]] || spec="{\"method\":\"mtp\",\"num_speculative_tokens\":$k}"
  l1=$(lat 1 "$spec"); l33=$(lat 33 "$spec")
  step=$(awk -v a="$l33" -v b="$l1" 'BEGIN{printf "%.1f", (a-b)/32*1000}')
  [[ -n $base ]] || base=$step
  echo "k=$k: $step ms per step ($(ratio "$step" "$base")x a plain step)"
done

fi
if [[ $PARTS == *4* ]]; then
echo "== 4. 32 concurrent sequences, 128 in / 128 out (bench throughput)"
thr() {  # model [spec] → output tok/s
  "$BIN" bench throughput -m "$1" --threads 2 --num-prompts 32 --input-len 128 --output-len 128 \
    --log-level warning ${2:+--speculative-config "$2"} 2>&1 |
    sed -nE 's/.*, ([0-9.]+) output tokens\/s.*/\1/p'
}
for pair in "Q4_1 n-gram|$Q41|$NGRAM" "F16 draft|$F16|$DRAFT"; do
  IFS='|' read -r name model spec <<<"$pair"
  plain=() drafted=()
  for _ in $(seq "$RUNS"); do plain+=("$(thr "$model")"); drafted+=("$(thr "$model" "$spec")"); done
  mp=$(median "${plain[@]}"); md=$(median "${drafted[@]}")
  echo "$name: plain $mp, with drafts $md output tok/s ($(ratio "$md" "$mp")x)"
done
fi
