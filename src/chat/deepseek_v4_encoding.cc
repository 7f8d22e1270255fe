// DeepSeek-V4's prompt encoder (shipped with the model in Python instead of a chat template;
// vLLM runs it for --tokenizer-mode deepseek_v4), rendered natively. Goldens:
// tests/fixtures/chat/deepseek_encoding_cases.json.
//
// Unlike V3.2 there is no tool role: tool results become <tool_result> blocks of a user turn,
// and consecutive user and tool messages merge into one turn (blocks joined by blank lines,
// results ordered by the calling assistant's call order). The prompt opens with BOS and, in
// thinking mode, a reasoning-effort preamble. A user or developer turn (a system turn too) that
// is followed by an assistant turn or ends the conversation hands over with <｜Assistant｜> and
// <think> (thinking mode: every time when reasoning is kept, otherwise from the last user turn
// on) or </think>. Assistant turns are [REASONING</think>]CONTENT[CALLS]<EOS>, the reasoning
// part in thinking mode only. Reasoning of turns before the last user turn is dropped in
// thinking mode unless some message carries tools. Only the keys vLLM's chat parser passes on
// are read (not the reference's response_format, task, wo_eos and mask).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "chat/deepseek_encoding_parts.h"

namespace kestrel::chat::deepseek {
namespace {

constexpr std::string_view kImage = "<｜deepseek_image｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

// The tool instructions and reasoning-effort preambles the model was trained with, verbatim.
// The tools' JSON lines go between the two tool parts.
constexpr std::string_view kToolsHead = R"dsml(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)dsml";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

constexpr std::string_view kEffortHigh =
    R"dsml(Reasoning Effort: Absolute maximum with no shortcuts permitted.
You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.
Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.

)dsml";
constexpr std::string_view kEffortMax =
    R"dsml(Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.
You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.
Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.

)dsml";

Expected<std::string_view> effort_preamble(const std::optional<std::string>& effort) {
  if (!effort || *effort == "low") return std::string_view();
  if (*effort == "high") return kEffortHigh;
  if (*effort == "max") return kEffortMax;
  return make_error("reasoning effort '{}' is not one of low, high, max", *effort);
}

// A message's content parts as one text: text parts as they are, images as their placeholder,
// joined by blank lines. Content that is not a list passes through unchanged.
Expected<ojson> flatten(const ojson* content) {
  if (content == nullptr || !content->is_array()) return content ? *content : ojson(nullptr);
  std::string out;
  bool first = true;
  for (const ojson& block : *content) {
    if (!first) out += "\n\n";
    first = false;
    if (!block.is_object()) {
      out += str(&block);
      continue;
    }
    const std::string type = str(get(block, "type"));
    if (type == "image" || type == "image_url") {
      out += kImage;
    } else if (type == "text") {
      const ojson* text = get(block, "text");
      if (block.contains("text") && (text == nullptr || !text->is_string()))
        return make_error("a text content part's text is not a string");
      if (text != nullptr) out += text->get<std::string>();
    } else {
      return make_error("content parts of type '{}' are not supported", type);
    }
  }
  return ojson(out);
}

// msg.get(key, default): the value when the key is present, null included.
ojson get_or(const ojson& msg, std::string_view key, const ojson& fallback) {
  const auto it = msg.find(key);
  return it == msg.end() ? fallback : *it;
}

bool merged_user(const std::vector<ojson>& merged) {
  return !merged.empty() && role(merged.back()) == "user" &&
         merged.back().contains("content_blocks");
}

// Tool messages become tool_result blocks of user turns; runs of user and tool messages
// collapse into one user turn.
Expected<std::vector<ojson>> merge_tool_messages(const std::vector<ojson>& messages) {
  std::vector<ojson> merged;
  for (const ojson& msg : messages) {
    const std::string r = role(msg);
    if (r == "tool") {
      ojson block = {{"type", "tool_result"},
                     {"tool_use_id", get_or(msg, "tool_call_id", "")},
                     {"content", get_or(msg, "content", "")}};
      if (merged_user(merged)) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back({{"role", "user"}, {"content_blocks", ojson::array({block})}});
      }
    } else if (r == "user") {
      const ojson raw = get_or(msg, "content", "");
      auto text = flatten(raw.is_null() ? nullptr : &raw);
      if (!text.ok()) return text.error();
      ojson block = {{"type", "text"}, {"text", *text}};
      if (merged_user(merged) && get(merged.back(), "task") == nullptr) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back(
            {{"role", "user"}, {"content", *text}, {"content_blocks", ojson::array({block})}});
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// The tool_result blocks of each user turn in the order of the calls (by id) of the latest
// assistant turn with calls; results without a known id sort as the first call. Stable.
void sort_tool_results(std::vector<ojson>& messages) {
  std::map<std::string, size_t> order;  // call id (as JSON text) → position
  for (ojson& msg : messages) {
    const std::string r = role(msg);
    const ojson* calls = get(msg, "tool_calls");
    if (r == "assistant" && truthy(calls) && calls->is_array()) {
      order.clear();
      for (size_t i = 0; i < calls->size(); ++i) {
        const ojson& call = (*calls)[i];
        const ojson* id = get(call, "id");
        if (!truthy(id)) {
          const ojson* function = get(call, "function");
          id = function != nullptr ? get(*function, "id") : nullptr;
        }
        if (truthy(id)) order[id->dump()] = i;
      }
    } else if (r == "user" && truthy(get(msg, "content_blocks"))) {
      ojson& blocks = msg["content_blocks"];
      std::vector<ojson> results;
      for (const ojson& b : blocks)
        if (str(get(b, "type")) == "tool_result") results.push_back(b);
      if (results.size() < 2 || order.empty()) continue;
      const auto position = [&](const ojson& b) -> size_t {
        const auto it = order.find(get_or(b, "tool_use_id", "").dump());
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const ojson& a, const ojson& b) { return position(a) < position(b); });
      size_t next = 0;
      for (ojson& b : blocks)
        if (str(get(b, "type")) == "tool_result") b = results[next++];
    }
  }
}

// A text part's text, which the reference joins as a str: absent is "", anything but a string
// is an error.
Expected<std::string> part_text(const ojson& part) {
  const ojson text = get_or(part, "text", "");
  if (!text.is_string()) return make_error("a text content part's text is not a string");
  return text.get<std::string>();
}

// A tool_result block's content: text as is; a list of parts as their texts (other parts
// marked unsupported) joined by blank lines.
Expected<std::string> tool_result_text(const ojson& content) {
  if (!content.is_array()) return str(content.is_null() ? nullptr : &content);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    if (i > 0) out += "\n\n";
    const ojson& part = content[i];
    if (!part.is_object()) return make_error("a tool result part is not an object");
    const std::string type = str(get(part, "type"));
    if (type != "text") {
      out += "[Unsupported " + type + "]";
      continue;
    }
    auto text = part_text(part);
    if (!text.ok()) return text.error();
    out += *text;
  }
  return out;
}

// A merged user turn: its text, image and tool_result blocks joined by blank lines.
Expected<std::string> user_blocks(const ojson& blocks) {
  std::string out;
  bool first = true;
  for (const ojson& block : blocks) {
    if (!first) out += "\n\n";
    first = false;
    const std::string type = str(get(block, "type"));
    if (type == "text") {
      auto text = part_text(block);
      if (!text.ok()) return text.error();
      out += *text;
    } else if (type == "image" || type == "image_url") {
      out += kImage;
    } else if (type == "tool_result") {
      auto text = tool_result_text(get_or(block, "content", ""));
      if (!text.ok()) return text.error();
      out += "<tool_result>" + *text + "</tool_result>";
    } else {
      out += "[Unsupported " + type + "]";
    }
  }
  return out;
}

struct Encoding {
  const std::vector<ojson>& messages;
  bool thinking;
  bool drop_thinking;
  std::string_view effort_preamble;
  int64_t last_user;
};

Expected<std::string> render_turn(const Encoding& e, size_t index, const std::string& r,
                                  const ojson* content, const std::string& tools) {
  const ojson& msg = e.messages[index];
  if (r == "system") return str_or_empty(content) + tools;
  if (r == "developer") {
    if (!truthy(content)) return make_error("message {}: a developer turn needs content", index);
    return std::string(kUser) + str(content) + tools;
  }
  if (r == "user") {
    const ojson* blocks = get(msg, "content_blocks");
    if (!truthy(blocks)) return std::string(kUser) + str_or_empty(content);
    auto text = user_blocks(*blocks);
    if (!text.ok()) return text.error();
    return std::string(kUser) + *text;
  }
  if (r == "latest_reminder") return std::string(kLatestReminder) + str(content);
  if (r == "assistant") {
    const ojson* calls = get(msg, "tool_calls");
    std::string calls_text;
    if (truthy(calls)) {
      auto block = dsml_tool_calls(*calls, "tool_calls");
      if (!block.ok()) return block.error();
      calls_text = "\n\n" + *block;
    }
    std::string thinking_part;
    if (e.thinking && (!e.drop_thinking || static_cast<int64_t>(index) > e.last_user))
      thinking_part = str_or_empty(get(msg, "reasoning")) + std::string(kThinkEnd);
    return thinking_part + str_or_empty(content) + calls_text + std::string(kEos);
  }
  return make_error(
      "message {}: role '{}' is not one of system, developer, user, assistant, tool, "
      "latest_reminder",
      index, r);
}

Expected<std::string> render(const Encoding& e, size_t index) {
  const ojson& msg = e.messages[index];
  const std::string r = role(msg);
  auto content = flatten(get(msg, "content"));
  if (!content.ok()) return content.error();
  const ojson* content_ptr = content->is_null() ? nullptr : &*content;
  std::string tools;
  if (const ojson* t = get(msg, "tools"); truthy(t)) {
    auto schemas = tool_schemas(*t);
    if (!schemas.ok()) return schemas.error();
    tools = "\n\n" + std::string(kToolsHead) + *schemas + std::string(kToolsTail);
  }
  std::string prompt;
  if (index == 0 && e.thinking) prompt += e.effort_preamble;
  auto turn = render_turn(e, index, r, content_ptr, tools);
  if (!turn.ok()) return turn.error();
  prompt += *turn;

  // The hand-over to the assistant, before an assistant turn or at the end.
  const size_t n = e.messages.size();
  const std::string next = index + 1 < n ? role(e.messages[index + 1]) : "";
  if (index + 1 < n && next != "assistant" && next != "latest_reminder") return prompt;
  if (r == "user" || r == "developer" ||
      (r == "system" && (index + 1 == n || next == "assistant"))) {
    prompt += kAssistant;
    const bool think =
        e.thinking && (!e.drop_thinking || static_cast<int64_t>(index) >= e.last_user);
    prompt += think ? kThinkStart : kThinkEnd;
  }
  return prompt;
}

// Before the last user turn: assistant turns without their reasoning, developer turns (and
// unknown roles) dropped.
std::vector<ojson> drop_thinking(const std::vector<ojson>& messages) {
  const int64_t last_user = last_user_index(messages);
  std::vector<ojson> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string r = role(messages[i]);
    if (r == "user" || r == "system" || r == "tool" || r == "latest_reminder" ||
        r == "direct_search_results" || static_cast<int64_t>(i) >= last_user) {
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

Expected<std::string> encode_v4(const std::vector<ojson>& messages, bool thinking, bool drop,
                                const std::optional<std::string>& effort) {
  auto merged = merge_tool_messages(messages);
  if (!merged.ok()) return merged.error();
  sort_tool_results(*merged);
  auto preamble = effort_preamble(effort);
  if (!preamble.ok()) return preamble.error();
  // Tools anywhere keep every turn's reasoning.
  const bool any_tools = std::any_of(merged->begin(), merged->end(),
                                     [](const ojson& m) { return truthy(get(m, "tools")); });
  const bool effective_drop = drop && !any_tools;
  const std::vector<ojson> full =
      thinking && effective_drop ? drop_thinking(*merged) : std::move(*merged);
  const Encoding e{full, thinking, effective_drop, *preamble, last_user_index(full)};
  std::string prompt(kBos);
  for (size_t i = 0; i < full.size(); ++i) {
    auto turn = render(e, i);
    if (!turn.ok()) return turn.error();
    prompt += *turn;
  }
  return prompt;
}

}  // namespace kestrel::chat::deepseek
