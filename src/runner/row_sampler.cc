#include "runner/row_sampler.h"

#include <algorithm>
#include <limits>

#include "runner/logits_rules.h"

namespace kestrel {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

void apply_mask(const std::vector<uint64_t>& bits, std::span<float> row) {
  for (size_t i = 0; i < row.size(); ++i) {
    const size_t word = i / 64;
    if (word >= bits.size() || ((bits[word] >> (i % 64)) & 1u) == 0) row[i] = kMasked;
  }
}

// The row's rules given the outputs before its position; false when they leave no token.
bool prepare_row(const WorkerRequest& req, std::span<const int32_t> outputs, std::span<float> row,
                 const std::vector<uint64_t>* mask) {
  const RequestSampling& s = req.sampling;
  if (!s.rules.empty()) apply_logits_rules(s.rules, outputs, row);
  if (static_cast<int64_t>(outputs.size()) < s.min_tokens) {
    for (const int32_t t : s.min_tokens_suppressed)
      if (t >= 0 && size_t(t) < row.size()) row[size_t(t)] = kMasked;
  }
  if (mask != nullptr) apply_mask(*mask, row);
  return std::any_of(row.begin(), row.end(), [](float v) { return v > kMasked; });
}

}  // namespace

cpu::SamplingParams to_cpu(const SamplingParams& p) {
  return cpu::SamplingParams{
      p.temperature,       p.top_k,   p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty,
      p.frequency_penalty, p.logprobs};
}

RowSamples sample_rows(WorkerRequest& req, std::span<float> rows, size_t vocab,
                       std::span<const int32_t> drafts, const std::vector<uint64_t>* mask) {
  RowSamples out;
  const cpu::SamplingParams params = to_cpu(req.sampling.params);
  // Row i sees the outputs so far plus the drafts before it.
  std::vector<int32_t> context;
  if (!drafts.empty()) context.assign(req.outputs().begin(), req.outputs().end());
  for (size_t i = 0; i <= drafts.size(); ++i) {
    const std::span<const int32_t> outputs = drafts.empty() ? req.outputs() : context;
    const std::span<float> row = rows.subspan(i * vocab, vocab);
    if (!prepare_row(req, outputs, row, i == 0 ? mask : nullptr)) {
      // Later rows end the step at the drafts accepted so far; the next step meets the same
      // rules on its first row and reports them.
      out.no_token_allowed = i == 0;
      break;
    }
    cpu::SampleResult r = cpu::sample(row, params, req.prompt(), outputs, req.rng);
    out.tokens.push_back(r.token);
    if (params.logprobs >= 0) {
      TokenLogprobs lp{r.token, r.logprob, 0, {}};
      lp.top.reserve(r.top.size());
      for (const cpu::TokenLogprob& t : r.top) lp.top.push_back(TokenLogprob{t.token, t.logprob});
      out.logprobs.push_back(std::move(lp));
    }
    if (i == drafts.size() || r.token != drafts[i]) break;
    context.push_back(r.token);
  }
  return out;
}

}  // namespace kestrel
