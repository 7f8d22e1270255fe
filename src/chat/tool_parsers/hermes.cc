// hermes (Qwen2.5, Qwen3, Hermes 2/3): each call is a JSON object in its own tags,
//   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

class HermesFormat : public TaggedCallFormat {
 public:
  explicit HermesFormat(ToolSetPtr tools)
      : TaggedCallFormat("<tool_call>", "</tool_call>", std::move(tools)) {}

 protected:
  std::optional<RawCall> parse_body(std::string_view body) const override {
    static constexpr std::string_view kArgsKeys[] = {"arguments"};
    return call_from_json(trim_space(body), kArgsKeys, tools());
  }

  std::optional<std::string> peek_name(std::string_view partial_body) const override {
    std::optional<std::string> name = peek_json_name(partial_body);
    if (name && !tools().accepts(*name)) return std::nullopt;
    return name;
  }
};

}  // namespace

std::unique_ptr<CallFormat> make_hermes_format(ToolSetPtr tools) {
  return std::make_unique<HermesFormat>(std::move(tools));
}

}  // namespace kestrel::chat
