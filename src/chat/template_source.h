// chat/template_source.h — where a model's chat template comes from, in vLLM's order of
// precedence: --chat-template (a file, or the template text itself), chat_template.jinja in the
// model directory, "chat_template" in tokenizer_config.json, the GGUF tokenizer.chat_template.
#pragma once

#include <string>

#include "base/status.h"

namespace kestrel::chat {

// `model_path`: a model directory or a .gguf file. `override_arg`: the --chat-template value
// (empty when not given). An error when no template is found or a named source is unreadable.
Expected<std::string> find_chat_template(const std::string& model_path,
                                         const std::string& override_arg = "");

}  // namespace kestrel::chat
