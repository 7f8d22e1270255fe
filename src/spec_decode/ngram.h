// spec_decode/ngram.h — prompt-lookup drafting (vLLM's n-gram proposer, specdec-quant.md §1.6): the
// longest suffix of the token history, between min_n and max_n tokens long, that also occurs
// earlier; the tokens that followed its earliest occurrence are the drafts. Pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

// Up to `k` drafts for `tokens` (prompt and outputs, no drafts). An occurrence may overlap the
// suffix, and the drafts stop at the end of the history. No suffix of min_n tokens recurs, or
// k <= 0: none. O(tokens.size()).
std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int64_t min_n, int64_t max_n,
                                   int64_t k);

}  // namespace kestrel
