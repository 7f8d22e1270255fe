#!/usr/bin/env bash
# Installs every Debian and PyPI dependency that Kestrel's build and test suite need.
# Idempotent: re-running only re-checks. Needs root (or sudo) for apt-get.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache clang clang-format libclang-rt-14-dev
  libboost-dev libboost-system-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libxxhash-dev libopenblas-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libgloo-dev libucx-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Test tooling only (fixtures are committed; torch/transformers are needed only to regenerate them,
# see tools/make_fixtures.py and bench/README.md).
PY=${PYTHON:-python3}
PIP_PACKAGES=(numpy pytest pytest-timeout gguf openai jsonschema pyyaml)
# A Debian-managed interpreter refuses plain pip installs (PEP 668); pyenv's does not.
$PY -m pip install --quiet --disable-pip-version-check "${PIP_PACKAGES[@]}" ||
  $PY -m pip install --quiet --disable-pip-version-check --break-system-packages "${PIP_PACKAGES[@]}"
