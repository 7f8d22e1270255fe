#!/usr/bin/env bash
# Configures Kestrel into ./build (Release, warnings as errors) and builds the given targets:
# by default only `kestrel`, the binary `kestrel serve` runs (scripts/test.sh builds the rest).
# With ccache installed (scripts/setup.sh installs it) compiles go through it, keyed on paths
# relative to the checkout, so a rebuild after a small change, or another clone on the same
# machine (CI), reuses the objects.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_WERROR=ON "${launcher[@]}" \
  >/dev/null
if [ $# -eq 0 ]; then set -- kestrel; fi
cmake --build build -j "$JOBS" --target "$@"
