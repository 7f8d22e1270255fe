#!/usr/bin/env bash
# A/B of two kestrel binaries on the default model, 2 threads: pp512 (512 prompt ids, one
# output) and tg128 (one prompt id, 129 greedy outputs, --ignore-eos), old–new–new–old per round
# so drift hits both alike; prints each run and the medians. ARGS: more generate options, e.g. a
# config directory with dummy weights (the Qwen3.5-MoE shape of docs/benchmarks.md):
#   MODEL=bench/configs/qwen3_5_moe_4layer ARGS="--load-format dummy --tokenizer \
#     $(bash scripts/fetch-default-model.sh) --max-model-len 1024 --kv-cache-memory 256M" ...
#   [MODEL=file.gguf] [ARGS=...] bash bench/ab_generate.sh ROUNDS OLD_BIN NEW_BIN  (default: the
#   default model)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=$1 OLD=$2 NEW=$3
MODEL=${MODEL:-$(bash scripts/fetch-default-model.sh)}
IDS=$(python3 -c "print(','.join(str(i % 1000 + 1) for i in range(512)))")
pp() {
  "$1" generate -m "$MODEL" ${ARGS:-} --prompt-ids "$IDS" -n 1 --temperature 0 --ignore-eos \
    --print-ids -t 2 2>&1 >/dev/null | tail -n 1 | sed -E 's/prompt: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/'
}
tg() {
  "$1" generate -m "$MODEL" ${ARGS:-} --prompt-ids 1 -n 129 --temperature 0 --ignore-eos \
    --print-ids -t 2 2>&1 >/dev/null | tail -n 1 | sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tok\/s.*/\1/'
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq "$ROUNDS"); do
  echo "pp old $(pp "$OLD") new $(pp "$NEW") new $(pp "$NEW") old $(pp "$OLD")" | tee -a "$log"
  echo "tg old $(tg "$OLD") new $(tg "$NEW") new $(tg "$NEW") old $(tg "$OLD")" | tee -a "$log"
done
python3 - "$log" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    w = line.split()
    for i in range(1, len(w), 2):
        runs.setdefault(w[0], {}).setdefault(w[i], []).append(float(w[i + 1]))
for test, r in runs.items():
    old, new = statistics.median(r["old"]), statistics.median(r["new"])
    print(f"{test}: old {old:.1f} new {new:.1f} tok/s median, new/old {new / old:.3f} ({len(r['old'])} runs each)")
PY
