#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

namespace kestrel {

namespace {

// Largest end <= `end` that does not cut a UTF-8 sequence of `s` in two.
size_t utf8_boundary(const std::string& s, size_t end) {
  while (end > 0 && end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

Expected<std::unique_ptr<OutputProcessor>> OutputProcessor::start(const Tokenizer* tokenizer,
                                                                  std::span<const int32_t> prompt,
                                                                  const OutputOptions& options,
                                                                  int64_t min_tokens) {
  if (!options.detokenize && !options.stop.empty())
    return make_error("stop strings need detokenized output");
  for (const std::string& s : options.stop)
    if (s.empty()) return make_error("stop strings must not be empty");
  if (options.detokenize && tokenizer == nullptr)
    return make_error("this model has no tokenizer, so requests must ask for token ids only");
  std::unique_ptr<OutputProcessor> p(new OutputProcessor());
  p->options_ = options;
  p->min_tokens_ = min_tokens;
  if (options.detokenize)
    p->detok_ =
        std::make_unique<IncrementalDetokenizer>(*tokenizer, options.skip_special_tokens, prompt);
  if (!options.include_stop_str_in_output) {
    for (const std::string& s : options.stop) p->hold_back_ = std::max(p->hold_back_, s.size() - 1);
  }
  return p;
}

std::optional<std::string> OutputProcessor::append_text(std::span<const int32_t> tokens,
                                                        bool skip_last) {
  const size_t before = text_.size();
  const size_t n = skip_last && !tokens.empty() ? tokens.size() - 1 : tokens.size();
  for (size_t i = 0; i < n; ++i) text_ += detok_->push(tokens[i]);
  if (options_.stop.empty() || num_outputs_ <= min_tokens_) return std::nullopt;
  // A match may start up to len-1 bytes before the new text; list order decides, as in vLLM.
  for (const std::string& stop : options_.stop) {
    const size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
    const size_t at = text_.find(stop, from);
    if (at == std::string::npos) continue;
    text_.resize(options_.include_stop_str_in_output ? at + stop.size() : at);
    return stop;
  }
  return std::nullopt;
}

RequestOutput OutputProcessor::process(EngineCoreOutput&& in, bool* abort_in_core) {
  *abort_in_core = false;
  num_outputs_ = in.num_output_tokens;

  RequestOutput out;
  out.token_ids = std::move(in.new_token_ids);
  out.logprobs = std::move(in.new_logprobs);
  out.prompt_logprobs = std::move(in.prompt_logprobs);
  out.finish_reason = in.finish_reason;
  if (in.stop_token_id) out.stop_reason = *in.stop_token_id;
  if (in.given_back) out.stop_reason = std::string("recomputed");
  out.num_prompt_tokens = in.num_prompt_tokens;
  out.num_cached_tokens = in.num_cached_tokens;
  out.num_output_tokens = in.num_output_tokens;
  out.first_scheduled = in.first_scheduled;
  out.kv_transfer = std::move(in.kv_transfer);

  if (detok_) {
    // The token that ended the request stays out of the text unless asked for, as in vLLM.
    const bool skip_last =
        in.finish_reason == FinishReason::kStop && !options_.include_stop_str_in_output;
    std::optional<std::string> stop = append_text(out.token_ids, skip_last);
    if (stop) {
      // A stop string outranks the length limit reached by the same token, as in vLLM.
      *abort_in_core = !out.finished();
      out.finish_reason = FinishReason::kStop;
      out.stop_reason = std::move(*stop);
    }
    if (out.finished() && !stop) text_ += detok_->finish();
    size_t end = text_.size();
    if (!out.finished()) end = utf8_boundary(text_, end > hold_back_ ? end - hold_back_ : 0);
    if (end > sent_) {
      out.text = text_.substr(sent_, end - sent_);
      sent_ = end;
    }
  }
  return out;
}

}  // namespace kestrel
