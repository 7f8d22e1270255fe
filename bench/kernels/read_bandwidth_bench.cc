// The memory read bandwidth decode is bounded by (issue 22's floors): each of `threads` threads
// sums its share of a 1 GiB buffer with AVX2 loads, several passes; prints GB/s per thread count.
//   ./build-bench/bench/kernels/read_bandwidth_bench [MAX_THREADS]   (default 2)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

float sum(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t n = (size_t(1) << 30) / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;  // touched: no zero-page reads
  for (int t = 1; t <= max_threads; ++t) {
    double best = 0;
    for (int pass = 0; pass < 5; ++pass) {
      std::vector<float> out(static_cast<size_t>(t));
      std::vector<std::thread> threads;
      const auto start = std::chrono::steady_clock::now();
      for (int k = 0; k < t; ++k)
        threads.emplace_back([&, k] { out[size_t(k)] = sum(buf + n / t * k, n / t); });
      for (auto& th : threads) th.join();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (out[0] < 0) std::puts("");  // keeps the sums
      best = std::max(best, double(n * sizeof(float)) / s / 1e9);
    }
    std::printf("%d thread%s: %.1f GB/s read (best of 5 passes over 1 GiB)\n", t, t > 1 ? "s" : "",
                best);
  }
  std::free(buf);
  return 0;
}
