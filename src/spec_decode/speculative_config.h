// spec_decode/speculative_config.h — `--speculative-config` as vLLM parses it (its JSON keys,
// method names and defaults; ../shared/docs/reference/specdec-quant.md §1.1, §1.6), checked in two
// stages: the text alone at parse time, then against the target model once it is loaded (the
// MTP layer count `n_predict`, the multiple-of-n_predict rule). Plain data; no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kestrel {

enum class SpeculativeMethod { kNgram, kDraftModel, kMtp };

// The method's name as vLLM spells it: "ngram", "draft_model", "mtp".
const char* speculative_method_name(SpeculativeMethod method);

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNgram;
  // The method as the user wrote it (an MTP alias such as "deepseek_mtp" becomes kMtp).
  std::string method_alias;
  // Drafts proposed per step (k). Unset until resolve_speculative_config for mtp, whose default
  // is the model's n_predict; always set for ngram and draft_model.
  std::optional<int64_t> num_speculative_tokens;
  // n-gram: the suffix lengths tried, longest first (both default to 5; one given copies it).
  int64_t prompt_lookup_min = 5;
  int64_t prompt_lookup_max = 5;
  // draft_model: the draft checkpoint (a directory or a .gguf file), same tokenizer as the target.
  std::string draft_model;
  // No drafts in a step that samples for more than this many requests (unset: Kestrel's own
  // rule, docs/architecture.md §7).
  std::optional<int64_t> disable_by_batch_size;
  // Accepted for the guides' command lines; Kestrel has no graph capture to skip.
  bool enforce_eager = false;

  int64_t k() const { return num_speculative_tokens.value_or(0); }
  // Positions past a step's tokens whose KV the proposer writes in that step (vLLM's
  // num_lookahead_tokens): k for a proposer with its own cache (mtp, draft_model), 0 for ngram.
  int64_t num_lookahead_tokens() const { return method == SpeculativeMethod::kNgram ? 0 : k(); }
};

// Parses the flag's JSON. nullopt (speculative decoding off): empty text, no method and no
// "model" with num_speculative_tokens unset or 0 ("{}"), or num_speculative_tokens 0 with any
// method (as vLLM). No method but a "model": draft_model ("ngram" / "[ngram]": ngram). null is
// accepted for every key (unset). Errors are one line starting with "--speculative-config",
// naming the key and saying why: unknown keys, wrong types, a method Kestrel does not run (with
// the reason), missing num_speculative_tokens for ngram/draft_model, a draft_model without
// "model", prompt_lookup_min > prompt_lookup_max, values out of range (k <= 32, vLLM's
// MAX_SPEC_LEN), draft_tensor_parallel_size != 1, a non-null quantization, draft_sample_method
// other than greedy, rejection_sample_method other than standard. max_model_len is accepted and
// ignored; "model" is ignored for ngram and mtp (mtp drafts with the target's own MTP layers).
Expected<std::optional<SpeculativeConfig>> parse_speculative_config(std::string_view text);

// Checks a parsed config against the target model and fills its defaults: for mtp, the model
// must have MTP layers (n_predict > 0 of them, loaded), k defaults to n_predict and a k larger
// than n_predict must be a multiple of it. `model_type` is config.json's, for the messages.
Status resolve_speculative_config(SpeculativeConfig& config, int64_t n_predict,
                                  std::string_view model_type);

}  // namespace kestrel
