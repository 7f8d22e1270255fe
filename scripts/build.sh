#!/usr/bin/env bash
# Configures and builds Kestrel into ./build (Release, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
