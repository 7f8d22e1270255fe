#include "chat/template_source.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "formats/gguf.h"

namespace kestrel::chat {
namespace fs = std::filesystem;

namespace {

// tokenizer_config.json holds the template as a string, or as a list of named templates of
// which "default" is the chat one.
Expected<std::string> from_tokenizer_config(const fs::path& file) {
  KASSIGN(std::string text, read_text_file(file.string()));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error("{}: not a JSON object", file.string());
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string())
        return t["template"].get<std::string>();
    }
    return make_error("{}: chat_template list has no \"default\" entry", file.string());
  }
  return make_error("{}: chat_template must be a string or a list", file.string());
}

}  // namespace

Expected<std::string> find_chat_template(const std::string& model_path,
                                         const std::string& override_arg) {
  if (!override_arg.empty()) {
    std::error_code ec;
    if (fs::is_regular_file(override_arg, ec)) return read_text_file(override_arg);
    // vLLM also accepts the template text itself.
    if (override_arg.find("{{") != std::string::npos ||
        override_arg.find("{%") != std::string::npos)
      return override_arg;
    return make_error("--chat-template '{}' is neither a readable file nor a template",
                      override_arg);
  }
  const fs::path p(model_path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "chat_template.jinja"))
      return read_text_file((p / "chat_template.jinja").string());
    if (fs::exists(p / "tokenizer_config.json")) {
      KASSIGN(std::string t, from_tokenizer_config(p / "tokenizer_config.json"));
      if (!t.empty()) return t;
    }
    return make_error(
        "model directory '{}' has no chat template (chat_template.jinja or "
        "tokenizer_config.json); pass --chat-template",
        model_path);
  }
  if (p.extension() == ".gguf") {
    KASSIGN(auto gguf, GgufFile::open(model_path));
    if (auto t = gguf->get_string("tokenizer.chat_template")) return *t;
    return make_error("GGUF file '{}' has no tokenizer.chat_template; pass --chat-template",
                      model_path);
  }
  return make_error("'{}' is neither a model directory nor a .gguf file", model_path);
}

}  // namespace kestrel::chat
