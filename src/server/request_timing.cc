#include "server/request_timing.h"

namespace kestrel::server {

namespace {

double seconds(TokenTimer::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void TokenTimer::on_output(bool has_tokens, Clock::time_point now) {
  if (!has_tokens) return;
  if (first_token_) {
    itls_.push_back(seconds(now - *last_token_));
  } else {
    first_token_ = now;
  }
  last_token_ = now;
}

RequestMetricsSample TokenTimer::sample(const RequestOutput& o, Clock::time_point arrival,
                                        int64_t max_tokens_param, int64_t n) const {
  RequestMetricsSample s;
  s.finished_reason = finish_reason_name(o.finish_reason.value_or(FinishReason::kAbort));
  const auto scheduled = o.first_scheduled.value_or(arrival);
  s.queue_time_s = seconds(scheduled - arrival);
  if (first_token_) {
    s.ttft_s = seconds(*first_token_ - arrival);
    s.prefill_time_s = seconds(*first_token_ - scheduled);
    s.decode_time_s = seconds(*last_token_ - *first_token_);
  }
  s.e2e_s = seconds(Clock::now() - arrival);
  s.inter_token_latencies_s = itls_;
  s.prompt_tokens = o.num_prompt_tokens;
  s.generation_tokens = o.num_output_tokens;
  s.max_tokens_param = max_tokens_param;
  s.n = n;
  s.engine = o.engine_index;
  return s;
}

}  // namespace kestrel::server
