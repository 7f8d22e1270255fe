// engine/output_processor.h — turns one request's core outputs into what its client streams:
// text deltas from the incremental detokenizer, stop strings (which the core cannot see, since
// they live in text), and usage. Made by the thread that submits the request, then used only by
// the engine client's output thread, with no lock: detokenizing one request holds up no other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "engine/protocol.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

class OutputProcessor {
 public:
  // Errors when `options` need text and there is no tokenizer (null), or name an empty stop
  // string. `tokenizer` must outlive the processor.
  static Expected<std::unique_ptr<OutputProcessor>> start(const Tokenizer* tokenizer,
                                                          std::span<const int32_t> prompt,
                                                          const OutputOptions& options,
                                                          int64_t min_tokens);

  // Converts one core output. A stop string match finishes the request; if the core had not
  // finished it too, the caller must abort it there (`*abort_in_core` is set). Nothing may be
  // processed after a finished output.
  RequestOutput process(EngineCoreOutput&& in, bool* abort_in_core);

 private:
  OutputProcessor() = default;
  // Appends the new tokens' text. Returns the matched stop string, if any, and truncates text.
  std::optional<std::string> append_text(std::span<const int32_t> tokens, bool skip_last);

  OutputOptions options_;
  int64_t min_tokens_ = 0;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::string text_;      // all output text so far (stop strings search it)
  size_t sent_ = 0;       // bytes of `text_` already handed out
  size_t hold_back_ = 0;  // bytes kept back while unfinished so no partial stop string leaks
  int64_t num_outputs_ = 0;
};

}  // namespace kestrel
