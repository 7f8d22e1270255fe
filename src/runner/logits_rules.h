// runner/logits_rules.h — per-request rules applied to a row of logits before the constraint
// mask, sampling and logprobs: OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words.
// Plain data; the runner applies them on the engine thread, once per sampled token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

struct TokenBias {
  int32_t token = 0;
  float bias = 0.0f;  // added to the logit; the server clamps it to [-100, 100]
};

struct LogitsRules {
  std::vector<TokenBias> logit_bias;
  // Non-empty: every other token is masked (-inf).
  std::vector<int32_t> allowed_token_ids;
  // Token sequences that must not be generated: a sequence's last token is masked when the
  // output ends with the rest of it (a one-token sequence is always masked), as vLLM does.
  std::vector<std::vector<int32_t>> bad_words;

  bool empty() const {
    return logit_bias.empty() && allowed_token_ids.empty() && bad_words.empty();
  }
};

// Applies `rules` to `logits` (one vocabulary row) given the tokens generated so far. Ids
// outside the row are ignored (the server rejects them before a request is admitted).
void apply_logits_rules(const LogitsRules& rules, std::span<const int32_t> output_tokens,
                        std::span<float> logits);

}  // namespace kestrel
