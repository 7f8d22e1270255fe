#include "server/protocol/responses_input.h"

#include <string>

#include <fmt/format.h>

namespace kestrel::server {

namespace {

using nlohmann::json;

ProtocolError input_error(const std::string& message) {
  return bad_request(message, "input");
}

std::string str_or(const json& object, const char* key, const std::string& fallback = "") {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool is_open_assistant(const json& messages) {
  return !messages.empty() && messages.back().value("role", "") == "assistant";
}

bool has_text(const json& message, const char* key) {
  const auto it = message.find(key);
  return it != message.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// Assistant text from a string or a list of output_text (or text) parts.
std::optional<std::string> assistant_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (const json& part : content) {
    if (!part.is_object()) return std::nullopt;
    const std::string type = str_or(part, "type", "output_text");
    if (type == "refusal") {
      text += str_or(part, "refusal");
    } else if (type == "output_text" || type == "text" || type == "input_text") {
      text += str_or(part, "text");
    } else {
      return std::nullopt;
    }
  }
  return text;
}

// An assistant turn piece goes into the previous assistant message when that slot is free,
// so reasoning, text and calls of one turn form one message.
json& assistant_slot(json& messages, const char* key) {
  if (!is_open_assistant(messages) || has_text(messages.back(), key))
    messages.push_back({{"role", "assistant"}});
  return messages.back();
}

std::optional<ProtocolError> add_message(const json& item, ResponsesConversation& out) {
  const auto role = item.find("role");
  if (role == item.end() || !role->is_string())
    return input_error("input message items need a string role");
  const auto content = item.find("content");
  if (content == item.end() || !(content->is_string() || content->is_array()))
    return input_error("input message items need content: a string or a list of parts");
  if (*role != "assistant") {
    json m = {{"role", *role}, {"content", *content}};
    for (const char* key : {"name"})
      if (item.contains(key)) m[key] = item[key];
    out.messages.push_back(std::move(m));
    return std::nullopt;
  }
  const std::optional<std::string> text = assistant_text(*content);
  if (!text) return input_error("assistant message content must be a string or output_text parts");
  assistant_slot(out.messages, "content")["content"] = *text;
  return std::nullopt;
}

std::optional<ProtocolError> add_function_call(const json& item, ResponsesConversation& out) {
  for (const char* key : {"call_id", "name", "arguments"})
    if (!item.contains(key) || !item[key].is_string())
      return input_error(fmt::format("function_call items need a string {}", key));
  json call = {{"id", item["call_id"]},
               {"type", "function"},
               {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
  json& m = is_open_assistant(out.messages)
                ? out.messages.back()
                : out.messages.emplace_back(json{{"role", "assistant"}});
  if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
  m["tool_calls"].push_back(std::move(call));
  return std::nullopt;
}

std::optional<ProtocolError> add_function_call_output(const json& item,
                                                      ResponsesConversation& out) {
  if (!item.contains("call_id") || !item["call_id"].is_string())
    return input_error("function_call_output items need a string call_id");
  const auto output = item.find("output");
  if (output == item.end() || !(output->is_string() || output->is_array()))
    return input_error("function_call_output items need output: a string or a list of parts");
  out.messages.push_back(
      {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", *output}});
  return std::nullopt;
}

std::optional<ProtocolError> add_reasoning(const json& item, ResponsesConversation& out) {
  if (item.contains("encrypted_content") && !item["encrypted_content"].is_null())
    return input_error("Encrypted content is not supported.");
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const auto parts = item.find(key);
    if (parts != item.end() && parts->is_array() && !parts->empty() && (*parts)[0].is_object()) {
      text = str_or((*parts)[0], "text");
      break;
    }
  }
  assistant_slot(out.messages, "reasoning")["reasoning"] = text;
  return std::nullopt;
}

}  // namespace

std::optional<ProtocolError> append_responses_input(const json& input, ResponsesConversation& out) {
  if (input.is_string()) {
    out.messages.push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array()) return input_error("input must be a string or a list of input items");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    if (!item.is_object()) return input_error(fmt::format("input[{}] must be an object", i));
    const std::string type = str_or(item, "type", item.contains("role") ? "message" : "");
    std::optional<ProtocolError> e;
    if (type == "message") {
      e = add_message(item, out);
    } else if (type == "function_call") {
      e = add_function_call(item, out);
    } else if (type == "function_call_output") {
      e = add_function_call_output(item, out);
    } else if (type == "reasoning") {
      e = add_reasoning(item, out);
    } else {
      e = input_error(
          fmt::format("Unsupported input item type: {}", type.empty() ? "(none)" : type));
    }
    if (e) return e;
  }
  if (!input.empty()) {
    const json& last = input.back();
    const std::string type = str_or(last, "type", last.contains("role") ? "message" : "");
    const std::string status = str_or(last, "status");
    const bool assistant_piece =
        type == "reasoning" || (type == "message" && str_or(last, "role") == "assistant");
    out.continue_final = assistant_piece && (status == "in_progress" || status == "incomplete");
  }
  return std::nullopt;
}

void append_responses_output(const json& output_items, ResponsesConversation& out) {
  json assistant = {{"role", "assistant"}};
  std::string text;
  for (const json& item : output_items) {
    const std::string type = str_or(item, "type");
    if (type == "message") {
      for (const json& part : item.value("content", json::array())) text += str_or(part, "text");
    } else if (type == "function_call") {
      if (!assistant.contains("tool_calls")) assistant["tool_calls"] = json::array();
      assistant["tool_calls"].push_back(
          {{"id", str_or(item, "call_id")},
           {"type", "function"},
           {"function",
            {{"name", str_or(item, "name")}, {"arguments", str_or(item, "arguments")}}}});
    }
  }
  assistant["content"] = text;
  out.messages.push_back(std::move(assistant));
}

}  // namespace kestrel::server
