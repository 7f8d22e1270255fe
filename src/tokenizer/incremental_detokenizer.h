// tokenizer/incremental_detokenizer.h — streaming token ids out as text: each push returns the
// new text as valid UTF-8, and the pieces add up to what decode() gives for all the ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel {

// Each delta is the growth of decode() over a short window of recent ids, so decoders whose
// output depends on context (SentencePiece drops the first token's leading space) stay exact.
// The window starts at an "anchor": a token that decodes to text on its own, which therefore
// absorbs any such first-token rule the same way in every decode of the window.
//
// Bytes of an unfinished UTF-8 sequence are held back until it completes; ill-formed bytes
// become U+FFFD, one per maximal subpart, as Python's errors="replace" decoding does. The
// concatenated deltas (with finish()) therefore equal decode(all ids) exactly when that is valid
// UTF-8, and its U+FFFD-repaired form otherwise.
class IncrementalDetokenizer {
 public:
  // `prompt`: ids that came before and are not to be streamed; its last tokens are kept as
  // context so that the first pushed token decodes as it does after them.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> prompt = {});

  // The text `id` completes; empty while it only extends an unfinished UTF-8 sequence.
  std::string push(int32_t id);
  // What is still held back, ill-formed leftovers as U+FFFD. Later pushes continue the stream.
  std::string finish();

 private:
  // Whether decode() ignores `id` wherever it appears (then it never enters the window).
  bool ignored(int32_t id) const;
  // Converts decoded bytes from `consumed_` on; `final` also flushes an unfinished sequence.
  std::string take(const std::string& text, bool final);
  // Restarts the window at the last anchor once nothing in it is held back.
  void advance(const std::string& text);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;
  size_t consumed_ = 0;  // bytes of decode(window_) already streamed
};

}  // namespace kestrel
