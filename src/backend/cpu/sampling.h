// backend/cpu/sampling.h — turning rows of logits into tokens, with per-request parameters:
// one row (sample), one request's rows with draft verification (sample_group), and the score of
// a given token (score_token, for prompt logprobs). Types are backend/ops.h's.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"

namespace kestrel::cpu {

// How the model scored a given token (a prompt token, for prompt logprobs): its logprob under the
// raw logits, its rank (1 = the most likely token) and the top-n alternatives, best first.
TokenLogprobs score_token(std::span<const float> logits, int32_t token, int top_n);

// logits: one row of vocab size, modified in place (penalties, temperature, masks).
// prompt_tokens feed the repetition penalty (as vLLM: prompt and output); output_tokens feed all
// three penalties. Logprobs (rank 0: not computed) are taken from the row as it arrives: after
// the caller's rules and masks, before penalties and temperature. vLLM reports logprobs of the
// raw logits, before all of these. Draws one number from rng unless greedy. `scratch`: the
// calling thread's arena (thread_scratch.h); null: buffers of this call's own.
TokenLogprobs sample(std::span<float> logits, const SamplingParams& p,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                     SamplerRng& rng, ScratchArena* scratch = nullptr);

// Backend::sample for one request (backend/ops.h, SampleGroup): its mask on the first row, then
// a draw per row while the drafts match. `scratch` as sample's.
void sample_group(const SampleGroup& group, GroupSamples& out, ScratchArena* scratch = nullptr);

}  // namespace kestrel::cpu
