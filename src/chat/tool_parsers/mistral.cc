// mistral: [TOOL_CALLS] followed by a JSON list of calls (tokenizers before v11),
//   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]
// or, from v11 on, by one call written as NAME[ARGS]{...}, the marker repeated per call.
#include <cctype>

#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kArgsKeys[] = {"arguments"};

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

class MistralFormat : public CallFormat {
 public:
  explicit MistralFormat(ToolSetPtr tools) : tools_(std::move(tools)) {}

  Step next(std::string_view text, bool eof) override {
    Step step = decide(text, eof);
    // Whitespace is dropped only right after a call (content may be cut anywhere).
    if (step.kind == StepKind::kContent) after_call_ = false;
    if (step.kind == StepKind::kCalls) after_call_ = true;
    return step;
  }

 private:
  Step decide(std::string_view text, bool eof) const {
    const std::string_view markers[] = {kToolCalls};
    if (auto step = scan_content(text, eof, markers, after_call_)) return *step;
    const size_t at = kToolCalls.size() + leading_space(text.substr(kToolCalls.size()));
    if (at == text.size()) return eof ? content_step(text.size()) : need_more();
    return text[at] == '[' ? list_at(text, at, eof) : named_at(text, at, eof);
  }

  Step list_at(std::string_view text, size_t at, bool eof) const {
    const std::optional<size_t> end = json_value_end(text.substr(at));
    if (!end) return eof ? content_step(text.size()) : need_more(peek_list(text.substr(at)));
    const size_t length = at + *end;
    const auto list = nlohmann::ordered_json::parse(text.substr(at, *end), nullptr, false);
    if (!list.is_array() || list.empty()) return content_step(length);
    std::vector<RawCall> calls;
    for (const auto& item : list) {
      std::optional<RawCall> call = call_from_json(item.dump(), kArgsKeys, *tools_);
      if (!call) return content_step(length);
      calls.push_back(std::move(*call));
    }
    return calls_step(length, std::move(calls));
  }

  // Names of the complete calls at the front of a partial list, and of the one being written.
  std::vector<std::string> peek_list(std::string_view list) const {
    std::vector<std::string> names;
    size_t at = 1;
    while (true) {
      at += leading_space(list.substr(at));
      if (at >= list.size() || list[at] != '{') return names;
      const std::optional<size_t> end = json_value_end(list.substr(at));
      if (!end) {
        std::optional<std::string> name = peek_json_name(list.substr(at));
        if (name && tools_->accepts(*name)) names.push_back(std::move(*name));
        return names;
      }
      std::optional<RawCall> call = call_from_json(list.substr(at, *end), kArgsKeys, *tools_);
      if (!call) return names;
      names.push_back(std::move(call->name));
      at += *end;
      at += leading_space(list.substr(at));
      if (at >= list.size() || list[at] != ',') return names;
      ++at;
    }
  }

  // NAME[ARGS]{...} starting at text[at].
  Step named_at(std::string_view text, size_t at, bool eof) const {
    size_t name_end = at;
    while (name_end < text.size() && is_name_char(text[name_end])) ++name_end;
    const std::string_view tail = text.substr(name_end);
    if (!tail.starts_with(kArgs)) {
      const bool may_follow = tail.size() < kArgs.size() && kArgs.starts_with(tail);
      if (!eof && may_follow) return need_more();
      return content_step(name_end);
    }
    std::string name(text.substr(at, name_end - at));
    const size_t args = name_end + kArgs.size();
    if (!tools_->accepts(name) || args == text.size() || text[args] != '{') {
      if (!eof && args == text.size() && tools_->accepts(name)) return need_more({name});
      return content_step(args);
    }
    const std::optional<size_t> end = json_value_end(text.substr(args));
    if (!end) return eof ? content_step(text.size()) : need_more({name});
    std::optional<std::string> object = arguments_object(text.substr(args, *end));
    if (!object) return content_step(args + *end);
    return calls_step(args + *end, {RawCall{std::move(name), std::move(*object)}});
  }

  ToolSetPtr tools_;
  bool after_call_ = false;
};

}  // namespace

std::unique_ptr<CallFormat> make_mistral_format(ToolSetPtr tools) {
  return std::make_unique<MistralFormat>(std::move(tools));
}

}  // namespace kestrel::chat
