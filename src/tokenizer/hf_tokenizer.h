// tokenizer/hf_tokenizer.h — Hugging Face tokenizers (tokenizer.json): added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor and decoder, as the file declares them.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// Builds a tokenizer from the text of tokenizer.json and of tokenizer_config.json (empty when
// the directory has none). When the config sets add_bos_token / add_eos_token, those decide
// whether BOS / EOS are added, as transformers does; otherwise the post_processor decides.
Expected<std::unique_ptr<Tokenizer>> parse_hf_tokenizer(std::string_view tokenizer_json,
                                                        std::string_view config_json);

}  // namespace kestrel
