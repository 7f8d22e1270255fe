#include "runner/logits_rules.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace kestrel {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

bool in_row(int32_t token, std::span<float> logits) {
  return token >= 0 && size_t(token) < logits.size();
}

}  // namespace

void apply_logits_rules(const LogitsRules& rules, std::span<const int32_t> output_tokens,
                        std::span<float> logits) {
  if (!rules.allowed_token_ids.empty()) {
    // Keep the allowed logits aside, mask the row, put them back: one pass over the vocabulary.
    std::vector<std::pair<int32_t, float>> kept;
    kept.reserve(rules.allowed_token_ids.size());
    for (const int32_t t : rules.allowed_token_ids)
      if (in_row(t, logits)) kept.emplace_back(t, logits[size_t(t)]);
    std::fill(logits.begin(), logits.end(), kMasked);
    for (const auto& [t, v] : kept) logits[size_t(t)] = v;
  }
  for (const TokenBias& b : rules.logit_bias)
    if (in_row(b.token, logits)) logits[size_t(b.token)] += b.bias;
  for (const std::vector<int32_t>& word : rules.bad_words) {
    if (word.empty() || word.size() > output_tokens.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    if (std::equal(word.begin(), word.begin() + prefix, output_tokens.end() - prefix) &&
        in_row(word.back(), logits))
      logits[size_t(word.back())] = kMasked;
  }
}

}  // namespace kestrel
