// chat/tool_parsers/tool_parser.h — turns a model's generated text into OpenAI tool calls, in one
// piece or as it streams. One parser per model family (the names of vLLM's --tool-call-parser); the
// formats each family emits are written up in the format files (chat/tool_parsers/*.cc).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

// From the request's tools[].function.
struct ToolSpec {
  std::string name;
  nlohmann::json parameters;
};

// `arguments` is the text of a JSON object.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ParsedMessage {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// The first delta of a call carries id and name; later ones only argument text.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id, name;
  std::string arguments;
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
};

// One per choice; not thread-safe. Text before, between and after calls is content (whitespace
// between and after calls is dropped); a call that is malformed, names a function outside the
// request's tools (when it gave any), or is cut off at the end comes back as content, markup and
// all. Streaming holds back only text that may still turn out to be tool-call markup, sends a
// call's id and name as soon as the name is known and its arguments once they are complete.
// feed()+finish() give what parse() gives, except when a call whose name was already sent turns
// out malformed: its text then follows as content and the call keeps empty arguments.
class ToolParser {
 public:
  virtual ~ToolParser() = default;
  // The whole generated text; independent of any streaming state.
  virtual ParsedMessage parse(std::string_view text) = 0;
  // Streaming: the next piece of generated text.
  virtual ToolStreamDelta feed(std::string_view delta) = 0;
  // End of generation: whatever was held back.
  virtual ToolStreamDelta finish() = 0;
};

// feed(delta), and when `last` also what finish() held back: one streamed piece's delta.
ToolStreamDelta feed_tool_calls(ToolParser& parser, std::string_view delta, bool last);

// nullptr for an unknown name. Ids are "call_" + 24 random alphanumerics.
std::unique_ptr<ToolParser> make_tool_parser(std::string_view name, std::vector<ToolSpec> tools);

// The names make_tool_parser knows, sorted.
const std::vector<std::string>& tool_parser_names();

}  // namespace kestrel::chat
