#include "runner/model_runner.h"

#include <limits>
#include <span>
#include <utility>

namespace kestrel {

ModelRunner::ModelRunner(CausalLM& model, KVCacheStorage kv)
    : model_(model), kv_(std::move(kv)), builder_(kv_.block_size()) {}

void ModelRunner::add_request(const RequestId& id, const RunnerRequestParams& params) {
  requests_.insert_or_assign(id, State{params, cpu::Rng(params.seed)});
}

void ModelRunner::remove_request(const RequestId& id) {
  requests_.erase(id);
}

Expected<std::unordered_map<RequestId, SampledToken>> ModelRunner::execute(
    const SchedulerOutput& output, const RequestLookup& lookup) {
  std::unordered_map<RequestId, SampledToken> sampled;
  builder_.clear();
  // Requests with a logits row, in row order.
  std::vector<std::pair<const Request*, State*>> rows;
  for (const ScheduledRequest& s : output.scheduled) {
    const Request* req = lookup(s.id);
    if (req == nullptr) return make_error("scheduled request {} is unknown", s.id);
    const int64_t end = s.start_position + s.num_new_tokens;
    if (s.num_new_tokens <= 0 || end > req->num_tokens())
      return make_error("request {}: tokens [{}, {}) out of range", s.id, s.start_position, end);
    const auto state = requests_.find(s.id);
    if (state == requests_.end()) return make_error("request {} has no sampling state", s.id);
    const auto tokens =
        std::span<const int32_t>(req->all_token_ids).subspan(s.start_position, s.num_new_tokens);
    builder_.add(tokens, int32_t(s.start_position), s.block_table,
                 s.is_prefill_chunk ? BatchBuilder::Logits::kNone : BatchBuilder::Logits::kLast);
    if (!s.is_prefill_chunk) rows.emplace_back(req, &state->second);
  }
  if (output.scheduled.empty()) return sampled;

  const int64_t vocab = model_.config().vocab_size;
  logits_.resize(rows.size() * size_t(vocab));
  model_.forward(builder_.batch(), kv_, logits_.data());

  for (size_t r = 0; r < rows.size(); ++r) {
    const Request& req = *rows[r].first;
    State& st = *rows[r].second;
    std::span<float> row(logits_.data() + r * size_t(vocab), size_t(vocab));
    if (req.num_output_tokens() < st.params.min_tokens) {
      for (int32_t t : st.params.min_tokens_suppressed)
        if (t >= 0 && t < vocab) row[size_t(t)] = -std::numeric_limits<float>::infinity();
    }
    cpu::SampleResult res =
        cpu::sample(row, st.params.sampling, req.prompt_token_ids, req.output_token_ids, st.rng);
    sampled[req.id] = SampledToken{res.token, res.logprob, std::move(res.top)};
  }
  return sampled;
}

}  // namespace kestrel
