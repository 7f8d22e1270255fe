#include "server/chat_conversation.h"

#include <string>

namespace kestrel::server {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

const json* non_null(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// The text of one content part (a bare string or a text-like part object).
std::string part_text(const json& part) {
  if (part.is_string()) return part.get<std::string>();
  const std::string type =
      part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "text";
  // validate_chat_messages() admits only text-like parts; refusal and thinking parts keep
  // their text under their type name, the others under "text".
  const char* key = type == "refusal" ? "refusal" : type == "thinking" ? "thinking" : "text";
  return part.contains(key) && part[key].is_string() ? part[key].get<std::string>() : "";
}

// Text parts joined by newlines; null or absent content is the empty string.
std::string content_text(const json* content) {
  if (content == nullptr) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string text;
  bool first = true;
  for (const json& part : *content) {
    if (!first) text += "\n";
    first = false;
    text += part_text(part);
  }
  return text;
}

// Every part as a text part; null or absent content has none.
ojson content_parts(const json* content) {
  ojson parts = ojson::array();
  if (content == nullptr) return parts;
  if (content->is_string())
    return ojson::array({{{"type", "text"}, {"text", content->get<std::string>()}}});
  for (const json& part : *content) parts.push_back({{"type", "text"}, {"text", part_text(part)}});
  return parts;
}

// Templates index arguments as a mapping (the transformers convention); a string that is not
// JSON, or no arguments at all, becomes an empty object, as vLLM does.
ojson tool_calls_for_template(const json& calls, ArgumentsForm form) {
  ojson out = ojson::array();
  for (const json& call : calls) {
    ojson c = ojson(call);
    ojson& function = c["function"];
    const auto args = function.find("arguments");
    if (args == function.end() || args->is_null()) {
      function["arguments"] = form == ArgumentsForm::kText ? ojson("{}") : ojson::object();
    } else if (args->is_string() && form == ArgumentsForm::kObject) {
      ojson parsed = ojson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      function["arguments"] = parsed.is_discarded() ? ojson::object() : std::move(parsed);
    }
    out.push_back(std::move(c));
  }
  return out;
}

ojson template_message(const json& message, ArgumentsForm form, ContentForm content) {
  const std::string role = message.at("role").get<std::string>();
  ojson out = ojson::object();
  out["role"] = role;
  const json* raw = non_null(message, "content");
  out["content"] = content == ContentForm::kParts && role != "tool" ? content_parts(raw)
                                                                    : ojson(content_text(raw));
  if (role == "assistant") {
    const json* calls = non_null(message, "tool_calls");
    // An empty list would send templates down their tool-call branch with nothing to render.
    if (calls != nullptr && !calls->empty())
      out["tool_calls"] = tool_calls_for_template(*calls, form);
    const json* reasoning = non_null(message, "reasoning");
    if (reasoning == nullptr) reasoning = non_null(message, "reasoning_content");
    if (reasoning != nullptr) {
      out["reasoning"] = ojson(*reasoning);
      out["reasoning_content"] = ojson(*reasoning);
    }
  } else if (role == "tool") {
    if (const json* id = non_null(message, "tool_call_id")) out["tool_call_id"] = ojson(*id);
  }
  if (const json* name = non_null(message, "name"); name != nullptr && name->is_string())
    out["name"] = ojson(*name);
  if (role == "developer") {
    const json* tools = non_null(message, "tools");
    out["tools"] = tools != nullptr ? ojson(*tools) : ojson(nullptr);
  }
  return out;
}

}  // namespace

ojson template_conversation(const json& messages, ArgumentsForm arguments, ContentForm content) {
  ojson out = ojson::array();
  for (const json& m : messages) out.push_back(template_message(m, arguments, content));
  return out;
}

bool has_text_arguments(const json& messages) {
  for (const json& m : messages) {
    const json* calls = m.value("role", "") == "assistant" ? non_null(m, "tool_calls") : nullptr;
    if (calls == nullptr) continue;
    for (const json& c : *calls) {
      const auto fn = c.find("function");
      if (fn != c.end() && fn->contains("arguments") && (*fn)["arguments"].is_string()) return true;
    }
  }
  return false;
}

}  // namespace kestrel::server
