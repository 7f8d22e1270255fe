// bench/token_codec.h — what the `bench serve` datasets need from a tokenizer (encode, decode,
// ids to draw random prompts from), answered either by a local tokenizer or by the server under
// test through its /tokenize and /detokenize endpoints, so no tokenizer files are needed to
// benchmark a remote server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::bench {

class TokenCodec {
 public:
  virtual ~TokenCodec() = default;
  virtual Expected<std::vector<int32_t>> encode(const std::string& text, bool add_special) = 0;
  // Special tokens are kept in the text.
  virtual Expected<std::string> decode(const std::vector<int32_t>& ids) = 0;
  // Ids random prompts are drawn from: ordinary (not special) tokens with non-empty text,
  // ascending.
  virtual Expected<std::vector<int32_t>> ordinary_ids() = 0;
};

// The whole vocabulary minus special and empty tokens. `tokenizer` must outlive the codec.
std::unique_ptr<TokenCodec> local_token_codec(const Tokenizer& tokenizer);

struct RemoteTokenizerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string api_key;
  std::string model;
};

// The server's tokenizer. Requests carry both vLLM's field names (prompt, add_special_tokens;
// reply "prompt" from /detokenize) and llama.cpp server's (content, add_special; reply
// "content"), so it works with Kestrel, vLLM and llama-server. Fails when the server cannot
// tokenize. Ordinary ids are the distinct tokens of a seeded synthetic multilingual text (the
// vocabulary itself is not served): random prompts then use a few thousand common tokens
// rather than the whole vocabulary, which leaves lengths exact.
Expected<std::unique_ptr<TokenCodec>> remote_token_codec(const RemoteTokenizerOptions& options);

}  // namespace kestrel::bench
