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

void RequestOutput::merge(RequestOutput&& later) {
  token_ids.insert(token_ids.end(), later.token_ids.begin(), later.token_ids.end());
  text += later.text;
  logprobs.insert(logprobs.end(), std::make_move_iterator(later.logprobs.begin()),
                  std::make_move_iterator(later.logprobs.end()));
  prompt_logprobs.insert(prompt_logprobs.end(),
                         std::make_move_iterator(later.prompt_logprobs.begin()),
                         std::make_move_iterator(later.prompt_logprobs.end()));
  if (later.finish_reason) {
    finish_reason = later.finish_reason;
    stop_reason = std::move(later.stop_reason);
    error = std::move(later.error);
    invalid_request = later.invalid_request;
  }
  num_prompt_tokens = later.num_prompt_tokens;
  num_cached_tokens = later.num_cached_tokens;
  num_output_tokens = later.num_output_tokens;
  if (later.first_scheduled) first_scheduled = later.first_scheduled;
  engine_index = later.engine_index;
  if (later.kv_transfer_params) kv_transfer_params = std::move(later.kv_transfer_params);
}

Status OutputProcessor::add_request(RequestHandle id, std::span<const int32_t> prompt,
                                    const OutputOptions& options, int64_t min_tokens) {
  if (requests_.contains(id)) return make_error("request {} is already in use", id);
  if (!options.detokenize && !options.stop.empty())
    return make_error("stop strings need detokenized output");
  for (const std::string& s : options.stop)
    if (s.empty()) return make_error("stop strings must not be empty");
  if (options.detokenize && tokenizer_ == nullptr)
    return make_error("this model has no tokenizer, so requests must ask for token ids only");
  State st;
  st.options = options;
  st.min_tokens = min_tokens;
  if (options.detokenize)
    st.detok =
        std::make_unique<IncrementalDetokenizer>(*tokenizer_, options.skip_special_tokens, prompt);
  if (!options.include_stop_str_in_output) {
    for (const std::string& s : options.stop) st.hold_back = std::max(st.hold_back, s.size() - 1);
  }
  requests_.put(id, std::move(st));
  return {};
}

std::optional<std::string> OutputProcessor::append_text(State& st, std::span<const int32_t> tokens,
                                                        bool skip_last) {
  const size_t before = st.text.size();
  const size_t n = skip_last && !tokens.empty() ? tokens.size() - 1 : tokens.size();
  for (size_t i = 0; i < n; ++i) st.text += st.detok->push(tokens[i]);
  if (st.options.stop.empty() || st.num_outputs <= st.min_tokens) return std::nullopt;
  // A match may start up to len-1 bytes before the new text; list order decides, as in vLLM.
  for (const std::string& stop : st.options.stop) {
    const size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
    const size_t at = st.text.find(stop, from);
    if (at == std::string::npos) continue;
    st.text.resize(st.options.include_stop_str_in_output ? at + stop.size() : at);
    return stop;
  }
  return std::nullopt;
}

std::optional<RequestOutput> OutputProcessor::process(EngineCoreOutput&& in, bool* abort_in_core) {
  *abort_in_core = false;
  State* found = requests_.find(in.id);
  if (found == nullptr) return std::nullopt;
  State& st = *found;
  st.num_outputs = in.num_output_tokens;

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
  out.kv_transfer_params = std::move(in.kv_transfer_params);

  if (st.detok) {
    // The token that ended the request stays out of the text unless asked for, as in vLLM.
    const bool skip_last =
        in.finish_reason == FinishReason::kStop && !st.options.include_stop_str_in_output;
    std::optional<std::string> stop = append_text(st, out.token_ids, skip_last);
    if (stop) {
      // A stop string outranks the length limit reached by the same token, as in vLLM.
      *abort_in_core = !out.finished();
      out.finish_reason = FinishReason::kStop;
      out.stop_reason = std::move(*stop);
    }
    if (out.finished() && !stop) st.text += st.detok->finish();
    size_t end = st.text.size();
    if (!out.finished()) end = utf8_boundary(st.text, end > st.hold_back ? end - st.hold_back : 0);
    if (end > st.sent) {
      out.text = st.text.substr(st.sent, end - st.sent);
      st.sent = end;
    }
  }
  if (out.finished()) requests_.erase(in.id);
  return out;
}

}  // namespace kestrel
