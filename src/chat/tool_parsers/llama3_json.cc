// llama3_json (Llama 3.1-3.3 with JSON tool calling): the message itself is the call,
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// optionally after <|python_tag|>, several separated by ';'. Only a message that starts that
// way holds calls; any other message is plain content.
#include "chat/tool_parsers/format.h"

namespace kestrel::chat {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonFormat : public CallFormat {
 public:
  explicit Llama3JsonFormat(ToolSetPtr tools) : tools_(std::move(tools)) {}

  Step next(std::string_view text, bool eof) override {
    switch (mode_) {
      case Mode::kStart:
        return start(text, eof);
      case Mode::kCalls:
        return between_calls(text, eof);
      case Mode::kContent:
        break;
    }
    return content_step(text.size());
  }

 private:
  enum class Mode { kStart, kCalls, kContent };

  Step start(std::string_view text, bool eof) {
    size_t at = leading_space(text);
    std::string_view after = text.substr(at);
    if (after.starts_with(kPythonTag)) {
      at += kPythonTag.size();
      at += leading_space(text.substr(at));
    } else if (!eof && after.size() < kPythonTag.size() && kPythonTag.starts_with(after)) {
      return need_more();
    }
    if (at == text.size()) return eof ? content_step(text.size()) : need_more();
    if (text[at] != '{') return plain(text);
    return object_at(text, at, eof);
  }

  // After a call: whitespace and ';' up to the next object; anything else ends the calls.
  Step between_calls(std::string_view text, bool eof) {
    size_t at = leading_space(text);
    if (at < text.size() && text[at] == ';') {
      ++at;
      at += leading_space(text.substr(at));
    }
    if (at == text.size()) return eof ? skip_step(at) : need_more();
    if (text[at] != '{') return plain(text);
    return object_at(text, at, eof);
  }

  // The object starting at text[at]; the `at` bytes before it go with it.
  Step object_at(std::string_view text, size_t at, bool eof) {
    const std::optional<size_t> end = json_value_end(text.substr(at));
    if (!end) {
      if (eof) return plain(text);
      std::optional<std::string> name = peek_json_name(text.substr(at));
      if (name && tools_->accepts(*name)) return need_more({std::move(*name)});
      return need_more();
    }
    // Llama's own prompt format says "parameters"; some fine-tunes write "arguments".
    static constexpr std::string_view kArgsKeys[] = {"parameters", "arguments"};
    std::optional<RawCall> call = call_from_json(text.substr(at, *end), kArgsKeys, *tools_);
    if (!call) return plain(text);
    mode_ = Mode::kCalls;
    return calls_step(at + *end, {std::move(*call)});
  }

  // From here on the message is content.
  Step plain(std::string_view text) {
    mode_ = Mode::kContent;
    return content_step(text.size());
  }

  ToolSetPtr tools_;
  Mode mode_ = Mode::kStart;
};

}  // namespace

std::unique_ptr<CallFormat> make_llama3_json_format(ToolSetPtr tools) {
  return std::make_unique<Llama3JsonFormat>(std::move(tools));
}

}  // namespace kestrel::chat
