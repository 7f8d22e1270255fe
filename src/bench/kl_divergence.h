// bench/kl_divergence.h — `kestrel bench kl`: how far one configuration's next-token
// distributions are from a reference's over a text (llama-perplexity --kl-divergence's measures):
// mean KL(reference ‖ test), the share of positions whose most likely token is the reference's,
// and both perplexities. Plain accumulation over positions; the caller runs the models.
#pragma once

#include <cstdint>
#include <span>

namespace kestrel::bench {

struct KlStats {
  int64_t positions = 0;
  double kl_sum = 0, kl_sq_sum = 0, kl_max = 0;
  int64_t top1_same = 0;
  double nll_ref = 0, nll_test = 0;  // Σ −log p(next token)

  double mean_kl() const;
  double kl_stderr() const;  // of the mean
  double top1_agreement() const;
  double ppl_ref() const;
  double ppl_test() const;
};

// Adds one position: both configurations' logits over the vocabulary and the token that came
// next in the text. Log-softmax in float64.
void add_position(KlStats& s, std::span<const float> ref_logits, std::span<const float> test_logits,
                  int32_t next_token);

}  // namespace kestrel::bench
