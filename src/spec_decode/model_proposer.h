// spec_decode/model_proposer.h — the proposers that run a model of their own over a cache of their
// own: the target's MTP module (DeepSeek-V3's, specdec-quant.md §1.2) and a draft model. Both draft
// greedily (argmax: a point-mass proposal, which exact-match verification keeps lossless).
#pragma once

#include <memory>

#include "spec_decode/proposer.h"

namespace kestrel {

// MTP: row p of a step takes the target's final-normed hidden state at p and token p + 1, so the
// last valid row predicts the token after the one just sampled; each further draft feeds the
// previous draft with the module's own pre-norm output (one module reused k times).
std::unique_ptr<Proposer> make_mtp_proposer(CausalLM& target, const ProposerOptions& options);

// A draft model: it runs the step's valid positions and the token just sampled, then one token
// per further draft. `options.draft_model` must be set.
std::unique_ptr<Proposer> make_draft_model_proposer(const ProposerOptions& options);

}  // namespace kestrel
