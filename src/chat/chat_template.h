// chat/chat_template.h — renders HuggingFace chat templates exactly as transformers does with
// Python jinja2 3.1 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
// transformers' tojson and raise_exception). Parse once, render many times, from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/jinja_ops.h"

namespace kestrel::chat {

struct Program;

class ChatTemplate {
 public:
  // Syntax errors carry the template line and column.
  static Expected<ChatTemplate> parse(std::string_view source);

  // `context` must be a JSON object; its keys become template variables (absent keys are
  // undefined, JSON null is None). Runtime errors (raise_exception, Python TypeErrors,
  // undefined access) carry the line and column of the failing statement or expression.
  // Python dicts keep insertion order, which shows in tojson and repr output: pass an
  // ordered_json to keep the caller's key order (nlohmann::json sorts keys).
  Expected<std::string> render(const nlohmann::ordered_json& context,
                               const Limits& limits = {}) const;
  Expected<std::string> render(const nlohmann::json& context, const Limits& limits = {}) const;

 private:
  Expected<std::string> render_value(const Value& context, const Limits& limits) const;

  std::shared_ptr<const Program> program_;
};

// Parse and render in one call.
Expected<std::string> render(std::string_view source, const nlohmann::ordered_json& context);
Expected<std::string> render(std::string_view source, const nlohmann::json& context);

}  // namespace kestrel::chat
