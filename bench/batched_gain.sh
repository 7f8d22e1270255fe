#!/usr/bin/env bash
# Issue 7's batching target: `kestrel bench throughput` output tok/s at 32 concurrent sequences
# against the same binary's single-stream decode (tg128, as bench/cpu_vs_llamacpp.sh measures
# it), alternating, several runs, medians. Two workloads: decode-heavy (16-token prompts) and
# 128-token prompts (the run then also computes 8,192 prompt tokens).
#   bash bench/batched_gain.sh [RUNS] [BIN...]   (default: 3 runs of build/src/kestrel)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
shift || true
BINS=("$@")
[[ ${#BINS[@]} -gt 0 ]] || BINS=(build/src/kestrel)
MODEL=$(bash scripts/fetch-default-model.sh)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A tg b16 b128
for _ in $(seq "$RUNS"); do
  for bin in "${BINS[@]}"; do
    t=$("$bin" generate -m "$MODEL" --prompt-ids 1 -n 129 --temperature 0 --ignore-eos \
        --print-ids -t 2 2>&1 >/dev/null | tail -n 1 |
        sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/')
    for in in 16 128; do
      o=$("$bin" bench throughput -m "$MODEL" --threads 2 --num-prompts 64 --input-len "$in" \
          --output-len 128 --max-num-seqs 32 --log-level warning 2>&1 |
          sed -nE 's/.*, ([0-9.]+) output tokens\/s.*/\1/p')
      if [[ $in == 16 ]]; then b16[$bin]+="$o "; else b128[$bin]+="$o "; fi
    done
    tg[$bin]+="$t "
    echo "$bin: tg128 $t | 32 seqs, 16 in: $(echo "${b16[$bin]}" | awk '{print $NF}') | 128 in: $(echo "${b128[$bin]}" | awk '{print $NF}') output tok/s"
  done
done
for bin in "${BINS[@]}"; do
  # shellcheck disable=SC2086
  mt=$(median ${tg[$bin]}); m16=$(median ${b16[$bin]}); m128=$(median ${b128[$bin]})
  echo "$bin median: tg128 $mt | 32 seqs 16 in $m16 ($(awk -v a="$m16" -v b="$mt" 'BEGIN{printf "%.2f", a/b}')x) | 128 in $m128 ($(awk -v a="$m128" -v b="$mt" 'BEGIN{printf "%.2f", a/b}')x)"
done
