// chat/reasoning_parser.h — splits a chat completion into reasoning and answer text, as vLLM's
// --reasoning-parser does, for models that think inside <think>…</think>.
//
// Whether generation starts inside the reasoning block is read from the rendered prompt rather
// than from chat_template_kwargs, because the template is what actually decided it: a prompt
// ending with "<think>" (after trailing whitespace) opened the block, one ending with "</think>"
// closed it (thinking switched off: all output is content, as vLLM routes it when the prompt
// already ends reasoning), anything else left it to the model.
//
// Per parser, when the prompt left it to the model:
//   qwen3         a "<think>" at the very start of the output opens reasoning; otherwise all of
//                 the output is content.
//   deepseek_r1   the output starts in reasoning (R1 may omit "<think>"); a leading "<think>"
//                 is dropped. Without "</think>" everything is reasoning.
//   deepseek_v3,  thinking only when the template opened it; otherwise all content.
//   deepseek_v31,
//   deepseek_v32  (vLLM registers no reasoning parser of this name: its DeepSeek-V3.2 recipe
//                 runs deepseek_v3, and so does Kestrel under either name.)
//   deepseek_v4   thinking unless the prompt closed it, as vLLM's deepseek_v4 parser thinks
//                 unless chat_template_kwargs switch thinking off: like deepseek_r1. Reasoning
//                 also ends where a DSML tool-call block (<｜DSML｜tool_calls>) begins, which
//                 stays in the content for the tool-call parser.
// Inside reasoning, text up to the first "</think>" is reasoning and the rest is content, taken
// verbatim. The markers that delimit reasoning never appear in the returned text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// One per choice; not thread-safe. Streaming: the concatenation of every feed() result and the
// final finish() equals parse() of the concatenated deltas.
class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // The whole generated text; independent of any streaming state.
  virtual ReasoningSplit parse(std::string_view text) = 0;
  // The next piece of generated text. Only a possible partial marker is held back.
  virtual ReasoningSplit feed(std::string_view delta) = 0;
  // End of generation: returns the held-back text.
  virtual ReasoningSplit finish() = 0;
};

// feed(delta), and when `last` also what finish() held back: one streamed piece's split.
ReasoningSplit feed_reasoning(ReasoningParser& parser, std::string_view delta, bool last);

// `prompt` is the rendered chat prompt, generation prompt included. nullptr for unknown names.
std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name,
                                                       std::string_view prompt);

// The accepted names, for --reasoning-parser validation and help text.
const std::vector<std::string>& reasoning_parser_names();

}  // namespace kestrel::chat
