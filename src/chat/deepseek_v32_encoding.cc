// DeepSeek-V3.2's prompt encoder (the model ships it as encoding/encoding_dsv32.py instead of a
// chat template; vLLM runs it for --tokenizer-mode deepseek_v32), rendered natively. Goldens:
// tests/fixtures/chat/deepseek_encoding_cases.json.
//
// The prompt opens with BOS. System text comes bare; a user turn is
// <｜User｜>TEXT<｜Assistant｜> followed by <think> on the last user turn in thinking mode and by
// </think> everywhere else; an assistant turn is [REASONING</think>]CONTENT[CALLS]<EOS>, the
// reasoning part only after the last user turn in thinking mode; tool results follow their
// assistant turn as <function_results> with one <result> per call, then <think> or </think>.
// In thinking mode, when the conversation ends with a user turn, earlier assistant turns lose
// their reasoning and earlier developer turns are dropped. Only the keys vLLM's chat parser
// passes on are read (not the reference's response_format and prefix).
#include <cstdint>
#include <string>
#include <vector>

#include "chat/deepseek_encoding_parts.h"

namespace kestrel::chat::deepseek {
namespace {

// The tool instructions the model was trained with, verbatim: the tools' JSON lines go between
// the two parts.
constexpr std::string_view kToolsHead = R"dsml(## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as part of your reply to the user:
<｜DSML｜function_calls>
<｜DSML｜invoke name="$FUNCTION_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$FUNCTION_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<｜DSML｜function_calls>
...
</｜DSML｜function_calls>
<function_results>
...
</function_results>
<think>...thinking about results</think>
Here are the functions available in JSONSchema format:
<functions>
)dsml";
constexpr std::string_view kToolsTail = "\n</functions>\n";

Expected<std::string> tools_section(const ojson& tools) {
  auto schemas = tool_schemas(tools);
  if (!schemas.ok()) return schemas.error();
  return "\n\n" + std::string(kToolsHead) + *schemas + std::string(kToolsTail);
}

struct Turn {
  const std::vector<ojson>& messages;
  size_t index;
  bool thinking;
  int64_t last_user;

  const ojson& msg() const { return messages[index]; }
  int64_t at() const { return static_cast<int64_t>(index); }
  std::string_view think_token() const {
    return at() == last_user && thinking ? kThinkStart : kThinkEnd;
  }
};

Expected<std::string> render_tool_result(const Turn& t) {
  // The assistant turn whose calls these results answer: the nearest earlier message that is
  // not a tool result. Indexes wrap as Python's do, so a leading tool result looks at the last
  // message, as the reference does.
  const auto n = static_cast<int64_t>(t.messages.size());
  const auto wrap = [&](int64_t i) -> const ojson& {
    return t.messages[static_cast<size_t>(i < 0 ? i + n : i)];
  };
  int64_t prev = t.at() - 1;
  while (prev >= 0 && role(wrap(prev)) == "tool") --prev;
  const ojson& assistant = wrap(prev);
  if (!(t.index == 0 || (prev >= 0 && role(assistant) == "assistant")))
    return make_error("message {}: a tool result must follow an assistant turn", t.index);
  const int64_t order = t.at() - prev;  // 1 for the first result
  const ojson* calls = get(assistant, "tool_calls");
  if (!truthy(calls) || !calls->is_array() || static_cast<int64_t>(calls->size()) < order)
    return make_error("message {}: a tool result without a matching tool call", t.index);
  std::string out;
  if (order == 1) out += "\n\n<function_results>";
  out += "\n<result>" + str(get(t.msg(), "content")) + "</result>";
  if (order == static_cast<int64_t>(calls->size())) {
    out += "\n</function_results>\n\n";
    out += t.at() >= t.last_user && t.thinking ? kThinkStart : kThinkEnd;
  }
  return out;
}

Expected<std::string> render_assistant(const Turn& t) {
  const ojson* calls = get(t.msg(), "tool_calls");
  std::string calls_text;
  if (truthy(calls)) {
    auto block = dsml_tool_calls(*calls, "function_calls");
    if (!block.ok()) return block.error();
    calls_text = "\n\n" + *block;
  }
  const ojson* reasoning = get(t.msg(), "reasoning");
  std::string thinking_part;
  if (t.thinking && t.at() > t.last_user) {
    if (!truthy(reasoning) && !truthy(calls))
      return make_error(
          "message {}: in thinking mode an assistant turn after the last user "
          "turn needs reasoning or tool calls",
          t.index);
    thinking_part = str_or_empty(reasoning) + std::string(kThinkEnd);
  }
  return thinking_part + str_or_empty(get(t.msg(), "content")) + calls_text + std::string(kEos);
}

Expected<std::string> render(const Turn& t) {
  const std::string r = role(t.msg());
  const ojson* content = get(t.msg(), "content");
  // The reference reads a message's tools whatever its role.
  std::string tools;
  if (const ojson* list = get(t.msg(), "tools"); truthy(list)) {
    auto section = tools_section(*list);
    if (!section.ok()) return section.error();
    tools = std::move(*section);
  }
  if (r == "system") return str_or_empty(content) + tools;
  if (r == "developer") {
    if (!truthy(content)) return make_error("message {}: a developer turn needs content", t.index);
    const std::string text = tools + "\n\n# The user's message is: " + str(content);
    return std::string(kUser) + text + std::string(kAssistant) + std::string(t.think_token());
  }
  if (r == "user")
    return std::string(kUser) + str(content) + std::string(kAssistant) +
           std::string(t.think_token());
  if (r == "tool") return render_tool_result(t);
  if (r == "assistant") return render_assistant(t);
  return make_error("message {}: role '{}' is not one of system, developer, user, assistant, tool",
                    t.index, r);
}

// Before the last user turn: assistant turns without their reasoning, developer turns (and any
// other role) dropped.
std::vector<ojson> drop_thinking(const std::vector<ojson>& messages) {
  const int64_t last_user = last_user_index(messages);
  std::vector<ojson> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string r = role(messages[i]);
    if (r == "user" || r == "system" || r == "tool" || static_cast<int64_t>(i) >= last_user) {
      out.push_back(messages[i]);
    } else if (r == "assistant") {
      ojson m = messages[i];
      m.erase("reasoning");
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace

Expected<std::string> encode_v32(const std::vector<ojson>& messages, bool thinking, bool drop) {
  std::vector<ojson> full = thinking && drop ? drop_thinking(messages) : messages;
  const int64_t last_user = last_user_index(full);
  std::string prompt(kBos);
  // The reference renders as many turns as it was given, from the list after dropping: a
  // dropped turn makes it run off the end, which is an error.
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i >= full.size())
      return make_error(
          "in thinking mode a developer turn before the last user turn is "
          "dropped, which leaves the DeepSeek-V3.2 encoder short of turns");
    auto turn = render(Turn{full, i, thinking, last_user});
    if (!turn.ok()) return turn.error();
    prompt += *turn;
  }
  return prompt;
}

}  // namespace kestrel::chat::deepseek
