#!/usr/bin/env bash
# Builds llama.cpp's own C++ tools (llama-server, llama-bench, llama-quantize, llama-perplexity)
# from the sources vendored in the PyPI sdist of llama-cpp-python, for side-by-side benchmarks.
# Not part of CI.
#   bash bench/build_llamacpp.sh [VERSION]   → prints the bin directory
# Output goes to ~/.cache/kestrel/llama.cpp-<version>/build/bin; with LLAMA_ISA=avx2, a build
# without AVX-512 (what an AVX2-only CPU runs, to set beside KESTREL_CPU_ISA=avx2) in build-avx2/;
# with LLAMA_ISA=avxvnni, the same plus ggml's AVX-VNNI kernels (beside KESTREL_CPU_ISA=avxvnni)
# in build-avxvnni/.
set -euo pipefail
VERSION=${1:-0.3.36}
ROOT=${KESTREL_CACHE:-$HOME/.cache/kestrel}/llama.cpp-$VERSION
ISA=${LLAMA_ISA:-native}
BUILD=$ROOT/build
[[ $ISA == avx2 || $ISA == avxvnni ]] && BUILD=$ROOT/build-$ISA
BIN=$BUILD/bin
if [[ -x $BIN/llama-server && -x $BIN/llama-bench && -x $BIN/llama-quantize &&
      -x $BIN/llama-perplexity ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$ROOT"
if [[ ! -d $ROOT/src ]]; then
  # The sdist's URL from PyPI's JSON API (`pip download` would try to build it for metadata).
  python3 - "$VERSION" "$ROOT" <<'PY'
import json, sys, urllib.parse, urllib.request
version, root = sys.argv[1], sys.argv[2]
index = "https://pypi.org/pypi/llama-cpp-python/json"
meta = json.load(urllib.request.urlopen(index))
sdist = next(u for u in meta["releases"][version] if u["packagetype"] == "sdist")
# Mirrors may answer with URLs relative to the index.
url = urllib.parse.urljoin(index, sdist["url"])
urllib.request.urlretrieve(url, f"{root}/{sdist['filename']}")
PY
  tar -xzf "$ROOT"/llama_cpp_python-"$VERSION".tar.gz -C "$ROOT"
  mv "$ROOT/llama_cpp_python-$VERSION/vendor/llama.cpp" "$ROOT/src"
  rm -rf "$ROOT/llama_cpp_python-$VERSION"
fi
# This machine's vector ISA, as a user building llama.cpp for it would: AVX2 always, AVX-512 (with
# VNNI and BF16) where /proc/cpuinfo lists it — but not GGML_NATIVE: on a CPU with AMX that also
# builds ggml's AMX matmul, which in this version crashes llama-bench (SIGSEGV in
# ggml_backend_amx_mul_mat on the default model). No curl (offline).
has() { [[ $ISA == native ]] && grep -qw "$1" /proc/cpuinfo && echo ON || echo OFF; }
VNNI=OFF
[[ $ISA == avxvnni ]] && VNNI=ON
cmake -S "$ROOT/src" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512="$(has avx512f)" \
  -DGGML_AVX512_VNNI="$(has avx512_vnni)" -DGGML_AVX512_BF16="$(has avx512_bf16)" \
  -DGGML_AVX_VNNI=$VNNI -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$BUILD" -j "$(nproc)" --target llama-server llama-bench llama-quantize \
  llama-perplexity >&2
echo "$BIN"
