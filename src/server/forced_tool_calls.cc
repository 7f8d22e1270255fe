#include "server/forced_tool_calls.h"

namespace kestrel::server {
namespace {

const nlohmann::json& parameters_of(const nlohmann::json& tool) {
  static const nlohmann::json kAnyObject = {{"type", "object"}};
  const nlohmann::json& fn = tool.at("function");
  const auto it = fn.find("parameters");
  return it != fn.end() && it->is_object() ? *it : kAnyObject;
}

ToolCallInfo call(const std::string& name, const nlohmann::json& arguments) {
  return ToolCallInfo{make_request_id("chatcmpl-tool"), name, arguments.dump()};
}

}  // namespace

nlohmann::json forced_tool_schema(const ToolChoice& choice, const nlohmann::json& tools,
                                  bool parallel) {
  if (choice.mode == ToolChoice::Mode::kNamed) {
    for (const nlohmann::json& tool : tools)
      if (tool.at("function").at("name") == choice.function_name) return parameters_of(tool);
  }
  nlohmann::json alternatives = nlohmann::json::array();
  for (const nlohmann::json& tool : tools) {
    alternatives.push_back({{"type", "object"},
                            {"properties",
                             {{"name", {{"enum", {tool.at("function").at("name")}}}},
                              {"parameters", parameters_of(tool)}}},
                            {"required", {"name", "parameters"}}});
  }
  nlohmann::json schema = {
      {"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(alternatives)}}}};
  if (!parallel) schema["maxItems"] = 1;
  return schema;
}

std::optional<std::vector<ToolCallInfo>> forced_tool_calls(const ToolChoice& choice,
                                                           const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return std::nullopt;
  std::vector<ToolCallInfo> calls;
  if (choice.mode == ToolChoice::Mode::kNamed) {
    if (!doc.is_object()) return std::nullopt;
    calls.push_back(call(choice.function_name, doc));
    return calls;
  }
  if (!doc.is_array() || doc.empty()) return std::nullopt;
  for (const nlohmann::json& c : doc) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
        !c.contains("parameters"))
      return std::nullopt;
    calls.push_back(call(c["name"].get<std::string>(), c["parameters"]));
  }
  return calls;
}

}  // namespace kestrel::server
