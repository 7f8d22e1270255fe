// server/request_timing.h — when one engine request's tokens arrived, for the per-request
// metrics (TTFT, inter-token latencies, prefill/decode/queue times). Owned by the session that
// reads the request's stream; not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/protocol.h"
#include "server/metrics.h"

namespace kestrel::server {

class TokenTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // An output of the request arrived at `now`; `has_tokens` when it carried tokens.
  void on_output(bool has_tokens, Clock::time_point now = Clock::now());

  // The metrics of the finished request (`meta`: its merged output) that arrived at `arrival`.
  RequestMetricsSample sample(const RequestOutput& meta, Clock::time_point arrival,
                              int64_t max_tokens_param, int64_t n) const;

 private:
  std::optional<Clock::time_point> first_token_, last_token_;
  std::vector<double> itls_;
};

}  // namespace kestrel::server
