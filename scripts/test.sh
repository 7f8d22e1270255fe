#!/usr/bin/env bash
# Builds Kestrel and its tests and runs them with CTest.
#   scripts/test.sh        the whole suite (README command 2, CI)
#   scripts/test.sh fast   the `unit` and `model` labels only: no forked ranks, no servers
# Any further arguments go to ctest (e.g. -R Scheduler, -L e2e, -LE slow).
# The default model and Gemma3-270M are fetched first and the run stops if either cannot be had;
# ctest runs with KESTREL_REQUIRE_TEST_DATA=1, so a test whose data from outside the repository
# (the models, ../shared) is missing fails instead of skipping. (Without that variable, as when
# ctest is run by hand, such tests skip.)
set -euo pipefail
cd "$(dirname "$0")/.."
filter=()
if [ "${1:-}" = "fast" ]; then
  shift
  filter=(-L '^(unit|model)$' -LE '^slow$')
fi
if ! bash scripts/fetch-default-model.sh >/dev/null; then
  echo "error: could not fetch the default model (scripts/fetch-default-model.sh); the tests need it" >&2
  exit 1
fi
if ! bash scripts/fetch-gemma3.sh >/dev/null; then
  echo "error: could not fetch Gemma3-270M (scripts/fetch-gemma3.sh); its real-weights tests need it" >&2
  exit 1
fi
bash scripts/build.sh all
export KESTREL_REQUIRE_TEST_DATA=1
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" "${filter[@]}" "$@"
