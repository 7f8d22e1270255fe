// engine/output_processor.h — turns the engine core's token outputs into what a client streams:
// text deltas from the incremental detokenizer, stop strings (which the core cannot see, since
// they live in text), and usage. Runs off the engine thread; not thread-safe by itself.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/request_table.h"
#include "engine/engine_core.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// How a request's text is produced.
struct OutputOptions {
  std::vector<std::string> stop;  // stop strings; the first match ends the request
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool detokenize = true;  // false: token ids only (benchmarks, token-id clients)
};

// vLLM's stop_reason: the matched stop string, or the request's own stop token id.
using StopReason = std::variant<std::monostate, std::string, int32_t>;

// One request's output since the previous one (the stream it arrives on names the request).
struct RequestOutput {
  std::vector<int32_t> token_ids;  // new since the previous output
  std::string text;                // new text since the previous output
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;  // prompt tokens 1, 2, … scored since the last output
  std::optional<FinishReason> finish_reason;
  StopReason stop_reason;
  std::string error;             // set with FinishReason::kError
  bool invalid_request = false;  // with kError: the request's own rules, not the engine, failed
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  int engine_index = 0;  // the data-parallel rank that runs the request (metrics' engine label)
  // A prefill for a remote decode: where its KV waits (the response's kv_transfer_params).
  std::optional<nlohmann::json> kv_transfer_params;
  bool finished() const { return finish_reason.has_value(); }

  // Folds a later output into this one (a slow reader sees one merged delta).
  void merge(RequestOutput&& later);
};

class OutputProcessor {
 public:
  // `tokenizer` may be null when no request asks for text.
  explicit OutputProcessor(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // Starts tracking a request. Errors when it needs text and there is no tokenizer.
  Status add_request(RequestHandle id, std::span<const int32_t> prompt,
                     const OutputOptions& options, int64_t min_tokens);

  // Converts one core output. Returns nothing for untracked requests (finished here already, e.g.
  // by a stop string while the core was still running them). A stop string match finishes the
  // request; if the core had not finished it too, the caller must abort it there
  // (`*abort_in_core` is set).
  std::optional<RequestOutput> process(EngineCoreOutput&& out, bool* abort_in_core);

  // Stops tracking a request (client abort, shutdown).
  void remove(RequestHandle id) { requests_.erase(id); }
  size_t num_requests() const { return requests_.size(); }

 private:
  struct State {
    OutputOptions options;
    int64_t min_tokens = 0;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::string text;      // all output text so far (stop strings search it)
    size_t sent = 0;       // bytes of `text` already handed out
    size_t hold_back = 0;  // bytes kept back while unfinished so no partial stop string leaks
    int64_t num_outputs = 0;
  };

  // Appends the new tokens' text. Returns the matched stop string, if any, and truncates text.
  std::optional<std::string> append_text(State& st, std::span<const int32_t> tokens,
                                         bool skip_last);

  const Tokenizer* tokenizer_;
  RequestTable<State> requests_;
};

}  // namespace kestrel
