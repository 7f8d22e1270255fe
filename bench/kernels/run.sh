#!/usr/bin/env bash
# Builds and runs the kernel microbenchmarks (bench/kernels) in build-bench/.
#   bench/kernels/run.sh                                   # everything, a few minutes on 2 cores
#   bench/kernels/run.sh --benchmark_filter='q4_0.*M:1/'   # extra arguments go to every binary
# The binaries accept the usual Google Benchmark flags (--benchmark_format=json, ...); a filter
# that matches nothing in a binary just makes that one print no rows.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-bench"
cmake -S "$root" -B "$build" -G Ninja -DKESTREL_BUILD_BENCHMARKS=ON -DCMAKE_BUILD_TYPE=Release \
  > /dev/null
bins=(peak_bench matmul_bench blas_bench attention_bench structured_bench contract_bench pool_bench)
# oneDNN's matmul beside Kestrel's (issue 18), where Debian's libdnnl-dev is installed.
[[ -e /usr/include/oneapi/dnnl/dnnl.hpp ]] && bins+=(dnnl_bench)
ninja -C "$build" "${bins[@]}" collectives_bench kv_transfer_bench
for bin in "${bins[@]}"; do
  "$build/bench/kernels/$bin" --benchmark_min_time=0.05 "$@"
done
# Not a Google Benchmark binary: its ranks are processes (issue 20).
"$build/bench/kernels/collectives_bench" 2
# KV pulls over loopback TCP beside memcpy (issue 21).
"$build/bench/kernels/kv_transfer_bench"
