#include "bench/serve_arrivals.h"

#include <cmath>
#include <random>

namespace kestrel::bench {

Status check_arrival_params(double request_rate, double burstiness) {
  if (!(request_rate > 0.0))
    return make_error("--request-rate must be positive or inf, got {}", request_rate);
  if (!(burstiness > 0.0)) return make_error("--burstiness must be positive, got {}", burstiness);
  return Status::Ok();
}

std::vector<double> arrival_times(int64_t n, double request_rate, double burstiness,
                                  uint64_t seed) {
  KCHECK(n >= 0, "negative request count {}", n);
  const Status st = check_arrival_params(request_rate, burstiness);
  KCHECK(st.ok(), "{}", st.message());
  std::vector<double> times(static_cast<size_t>(n), 0.0);
  if (n == 0 || std::isinf(request_rate)) return times;

  if (std::isinf(burstiness)) {
    for (size_t i = 0; i < times.size(); ++i) times[i] = double(i + 1) / request_rate;
    return times;
  }
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0.0;
  for (double& time : times) {
    t += gap(rng);
    time = t;
  }
  // Tiny shapes can underflow every gap to 0; then there is nothing to scale.
  if (times.back() > 0.0) {
    const double scale = double(n) / request_rate / times.back();
    for (double& time : times) time *= scale;
  }
  return times;
}

}  // namespace kestrel::bench
