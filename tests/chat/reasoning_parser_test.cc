// Reasoning parsers: prompts rendered from the real chat templates decide where generation
// starts; whole-text and streamed splits must agree at every way of cutting the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/reasoning_parser.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kDeepSeekBos = "<｜begin▁of▁sentence｜>";
const std::string kDeepSeekEos = "<｜end▁of▁sentence｜>";

std::string templates_dir() {
  return test::shared_dir() + "/testdata/chat_templates/";
}

// Renders a shared template for one user turn; `extra` (thinking switches, tools) is merged into
// the context.
std::string render_prompt(const std::string& file, const ojson& extra,
                          const std::string& user = "What is 2+2?") {
  std::ifstream f(templates_dir() + file, std::ios::binary);
  EXPECT_TRUE(f.good()) << file;
  std::stringstream source;
  source << f.rdbuf();
  auto tmpl = ChatTemplate::parse(source.str());
  EXPECT_TRUE(tmpl.ok()) << file << ": " << tmpl.error().message;
  if (!tmpl.ok()) return "";
  const bool deepseek = file.starts_with("deepseek");
  ojson ctx;
  ctx["messages"] = ojson::array({{{"role", "user"}, {"content", user}}});
  ctx["add_generation_prompt"] = true;
  if (deepseek) ctx["bos_token"] = kDeepSeekBos;
  ctx["eos_token"] = deepseek ? kDeepSeekEos : "<|im_end|>";
  for (const auto& [k, v] : extra.items()) ctx[k] = v;
  auto prompt = tmpl->render(ctx);
  EXPECT_TRUE(prompt.ok()) << file << ": " << prompt.error().message;
  return prompt.ok() ? *prompt : "";
}

class ReasoningParserTemplates : public ::testing::Test {
 protected:
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(templates_dir() + "qwen3.jinja", "the shared chat templates");
  }
};

std::unique_ptr<ReasoningParser> make(std::string_view name, std::string_view prompt) {
  auto p = make_reasoning_parser(name, prompt);
  EXPECT_TRUE(p != nullptr) << name;
  return p;
}

ReasoningSplit stream(std::string_view name, std::string_view prompt,
                      const std::vector<std::string_view>& deltas) {
  auto p = make(name, prompt);
  ReasoningSplit total;
  for (std::string_view d : deltas) {
    ReasoningSplit s = p->feed(d);
    total.reasoning += s.reasoning;
    total.content += s.content;
  }
  ReasoningSplit s = p->finish();
  total.reasoning += s.reasoning;
  total.content += s.content;
  return total;
}

// parse() and streaming in one piece, in two pieces cut at every byte, in three pieces (short
// outputs) and byte by byte must all give `reasoning` / `content`.
void expect_split(std::string_view name, std::string_view prompt, std::string_view output,
                  std::string_view reasoning, std::string_view content) {
  SCOPED_TRACE(std::string(name) + " output: " + std::string(output));
  ReasoningSplit whole = make(name, prompt)->parse(output);
  EXPECT_EQ(whole.reasoning, reasoning);
  EXPECT_EQ(whole.content, content);
  const size_t n = output.size();
  for (size_t i = 0; i <= n; ++i) {
    ReasoningSplit s = stream(name, prompt, {output.substr(0, i), output.substr(i)});
    ASSERT_EQ(s.reasoning, reasoning) << "cut at " << i;
    ASSERT_EQ(s.content, content) << "cut at " << i;
    if (n > 40) continue;
    for (size_t j = i; j <= n; ++j) {
      s = stream(name, prompt, {output.substr(0, i), output.substr(i, j - i), output.substr(j)});
      ASSERT_EQ(s.reasoning, reasoning) << "cuts at " << i << ", " << j;
      ASSERT_EQ(s.content, content) << "cuts at " << i << ", " << j;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < n; ++i) bytes.push_back(output.substr(i, 1));
  ReasoningSplit s = stream(name, prompt, bytes);
  EXPECT_EQ(s.reasoning, reasoning) << "byte by byte";
  EXPECT_EQ(s.content, content) << "byte by byte";
}

constexpr std::string_view kThought = "Let me think… 2+2=4.";
constexpr std::string_view kAnswer = "The answer is 4.";

// ---- Prompts from the real templates ----

TEST_F(ReasoningParserTemplates, DeepSeekV31ThinkingOn) {
  const std::string prompt = render_prompt("deepseek-v3.1.jinja", {{"thinking", true}});
  EXPECT_TRUE(prompt.ends_with("<｜Assistant｜><think>")) << prompt;
  const std::string out = std::string(kThought) + "</think>" + std::string(kAnswer);
  for (std::string_view name : {"deepseek_v31", "deepseek_v3", "deepseek_r1", "qwen3"}) {
    expect_split(name, prompt, out, kThought, kAnswer);
  }
}

TEST_F(ReasoningParserTemplates, DeepSeekV31ThinkingOffAndDefault) {
  const std::string off = render_prompt("deepseek-v3.1.jinja", {{"thinking", false}});
  const std::string unset = render_prompt("deepseek-v3.1.jinja", ojson::object());
  for (const std::string& prompt : {off, unset}) {
    EXPECT_TRUE(prompt.ends_with("<｜Assistant｜></think>")) << prompt;
    // The template closed the block, so even R1's parser must not call the answer reasoning.
    for (std::string_view name : {"deepseek_v31", "deepseek_v3", "deepseek_r1", "qwen3"}) {
      expect_split(name, prompt, kAnswer, "", kAnswer);
    }
  }
}

TEST_F(ReasoningParserTemplates, DeepSeekV31EnableThinkingAlias) {
  const std::string prompt = render_prompt("deepseek-v3.1.jinja", {{"enable_thinking", true}});
  EXPECT_TRUE(prompt.ends_with("<think>")) << prompt;
  expect_split("deepseek_v31", prompt, "Hmm.</think>4", "Hmm.", "4");
}

TEST_F(ReasoningParserTemplates, DeepSeekV3LeavesItToTheParser) {
  const std::string prompt = render_prompt("deepseek-v3.jinja", ojson::object());
  EXPECT_TRUE(prompt.ends_with("<｜Assistant｜>")) << prompt;
  const std::string out =
      "<think>\n" + std::string(kThought) + "\n</think>\n\n" + std::string(kAnswer);
  // V3 parsers think only when the template opened the block.
  expect_split("deepseek_v3", prompt, kAnswer, "", kAnswer);
  expect_split("deepseek_v31", prompt, out, "", out);
  // R1 reasons from the first byte, with or without its own "<think>".
  expect_split("deepseek_r1", prompt, out, "\n" + std::string(kThought) + "\n",
               "\n\n" + std::string(kAnswer));
  expect_split("deepseek_r1", prompt, std::string(kThought) + "</think>" + std::string(kAnswer),
               kThought, kAnswer);
}

TEST_F(ReasoningParserTemplates, Qwen3ThinkingOnAndDefault) {
  const std::string on = render_prompt("qwen3.jinja", {{"enable_thinking", true}});
  const std::string unset = render_prompt("qwen3.jinja", ojson::object());
  const std::string out =
      "<think>\n" + std::string(kThought) + "\n</think>\n\n" + std::string(kAnswer);
  for (const std::string& prompt : {on, unset}) {
    EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n")) << prompt;
    expect_split("qwen3", prompt, out, "\n" + std::string(kThought) + "\n",
                 "\n\n" + std::string(kAnswer));
    // The model may skip thinking: with no "<think>" all of it is the answer.
    expect_split("qwen3", prompt, kAnswer, "", kAnswer);
  }
}

TEST_F(ReasoningParserTemplates, Qwen3ThinkingOff) {
  const std::string prompt = render_prompt("qwen3.jinja", {{"enable_thinking", false}});
  EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << prompt;
  expect_split("qwen3", prompt, kAnswer, "", kAnswer);
}

TEST_F(ReasoningParserTemplates, Qwen3OnlyThePromptTailCounts) {
  // A "<think>" the user typed must not look like an opened block.
  const std::string prompt =
      render_prompt("qwen3.jinja", ojson::object(), "What does <think> mean?");
  EXPECT_NE(prompt.find("<think>"), std::string::npos);
  expect_split("qwen3", prompt, "It opens a thought.", "", "It opens a thought.");
  expect_split("qwen3", prompt, "<think>Hm.</think>It opens", "Hm.", "It opens");
}

TEST_F(ReasoningParserTemplates, Qwen35ThinksByDefault) {
  const std::string unset = render_prompt("qwen3.5-community.jinja", ojson::object());
  const std::string on = render_prompt("qwen3.5-community.jinja", {{"enable_thinking", true}});
  for (const std::string& prompt : {unset, on}) {
    EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n<think>\n")) << prompt;
    const std::string out = std::string(kThought) + "\n</think>\n\n" + std::string(kAnswer);
    expect_split("qwen3", prompt, out, std::string(kThought) + "\n", "\n\n" + std::string(kAnswer));
    // Truncated before "</think>": everything so far is reasoning.
    expect_split("qwen3", prompt, kThought, kThought, "");
  }
}

TEST_F(ReasoningParserTemplates, Qwen35ThinkingOff) {
  const std::string prompt = render_prompt("qwen3.5-community.jinja", {{"enable_thinking", false}});
  EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << prompt;
  expect_split("qwen3", prompt, kAnswer, "", kAnswer);
}

TEST_F(ReasoningParserTemplates, Qwen35ToolsSwitchThinkingOff) {
  const ojson tools = ojson::array(
      {{{"type", "function"},
        {"function",
         {{"name", "add"},
          {"description", "Add two integers."},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}},
            {"required", ojson::array({"a", "b"})}}}}}}});
  const std::string prompt = render_prompt("qwen3.5-community.jinja", {{"tools", tools}});
  EXPECT_TRUE(prompt.ends_with("<think>\n\n</think>\n\n")) << prompt;
  expect_split("qwen3", prompt, kAnswer, "", kAnswer);
}

// ---- Edge cases, with hand-written prompts ----

constexpr std::string_view kOpenPrompt = "<|im_start|>assistant\n<think>\n";
constexpr std::string_view kClosedPrompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr std::string_view kUnsetPrompt = "<|im_start|>assistant\n";

TEST(ReasoningParserEdges, NoEndMarker) {
  expect_split("qwen3", kOpenPrompt, "still thinking <b>", "still thinking <b>", "");
  expect_split("qwen3", kUnsetPrompt, "<think>still thinking", "still thinking", "");
  expect_split("deepseek_r1", kUnsetPrompt, "no tags at all", "no tags at all", "");
  expect_split("deepseek_r1", kUnsetPrompt, "<think>cut off", "cut off", "");
  expect_split("deepseek_v3", kOpenPrompt, "cut off", "cut off", "");
  // A partial end marker left at the end is plain reasoning text.
  expect_split("qwen3", kOpenPrompt, "almost</thin", "almost</thin", "");
}

TEST(ReasoningParserEdges, NoStartMarker) {
  // Unopened and not opened at byte 0: content verbatim, later markers included.
  expect_split("qwen3", kUnsetPrompt, "Plain answer.", "", "Plain answer.");
  expect_split("qwen3", kUnsetPrompt, "a <think>b</think> c", "", "a <think>b</think> c");
  expect_split("qwen3", kUnsetPrompt, " <think>x</think>y", "", " <think>x</think>y");
  expect_split("qwen3", kUnsetPrompt, "<thin", "", "<thin");
  expect_split("qwen3", kUnsetPrompt, "<p>Hi</p>", "", "<p>Hi</p>");
  expect_split("deepseek_v3", kUnsetPrompt, "x</think>y", "", "x</think>y");
  expect_split("deepseek_r1", kClosedPrompt, "x</think>y", "", "x</think>y");
}

TEST(ReasoningParserEdges, EmptyReasoningAndEmptyOutput) {
  expect_split("qwen3", kUnsetPrompt, "<think></think>Answer", "", "Answer");
  expect_split("qwen3", kOpenPrompt, "</think>Answer", "", "Answer");
  expect_split("deepseek_r1", kUnsetPrompt, "<think></think>", "", "");
  expect_split("deepseek_v31", "<｜Assistant｜><think>", "</think>", "", "");
  for (std::string_view name : reasoning_parser_names()) {
    expect_split(name, kOpenPrompt, "", "", "");
    expect_split(name, kUnsetPrompt, "", "", "");
  }
}

TEST(ReasoningParserEdges, OnlyTheFirstMarkersDelimit) {
  // A leading "<think>" after an opened prompt is dropped, not kept as reasoning.
  expect_split("qwen3", kOpenPrompt, "<think>a</think>b", "a", "b");
  // After the block closes, everything is the answer verbatim.
  expect_split("qwen3", kOpenPrompt, "a</think>b</think><think>c", "a", "b</think><think>c");
  // Inside reasoning, a second "<think>" is just text.
  expect_split("deepseek_r1", kUnsetPrompt, "<think>a<think>b</think>c", "a<think>b", "c");
}

TEST(ReasoningParserEdges, PromptTrailingWhitespaceIgnored) {
  expect_split("deepseek_v3", "<｜Assistant｜><think> \r\n\t", "a</think>b", "a", "b");
  expect_split("deepseek_v3", "<｜Assistant｜></think>\n", "a</think>b", "", "a</think>b");
  expect_split("deepseek_v3", "", "a</think>b", "", "a</think>b");
}

TEST(ReasoningParserStreaming, MarkerSplitAcrossDeltas) {
  auto p = make("qwen3", kUnsetPrompt);
  ReasoningSplit s = p->feed("<thi");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "");
  s = p->feed("nk>Let me");
  EXPECT_EQ(s.reasoning, "Let me");
  s = p->feed(" see</");
  EXPECT_EQ(s.reasoning, " see");  // "</" may start "</think>": held back
  s = p->feed("th");
  EXPECT_EQ(s.reasoning, "");
  s = p->feed("ink>The ans");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "The ans");
  s = p->feed("wer</");  // content is never held back
  EXPECT_EQ(s.content, "wer</");
  s = p->finish();
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "");
}

TEST(ReasoningParserStreaming, HoldsBackOnlyAPossibleMarker) {
  auto p = make("deepseek_r1", kUnsetPrompt);
  ReasoningSplit s = p->feed("<");
  EXPECT_EQ(s.reasoning, "");  // could still be "<think>"
  s = p->feed("b>");
  EXPECT_EQ(s.reasoning, "<b>");  // could not: released at once
  s = p->feed("x </thin");
  EXPECT_EQ(s.reasoning, "x ");
  s = p->feed("g>");
  EXPECT_EQ(s.reasoning, "</thing>");
  s = p->feed("a <");
  EXPECT_EQ(s.reasoning, "a ");
  s = p->finish();
  EXPECT_EQ(s.reasoning, "<");
  EXPECT_EQ(s.content, "");

  auto q = make("qwen3", kUnsetPrompt);
  s = q->feed("<");
  EXPECT_EQ(s.content, "");
  s = q->feed("p>");
  EXPECT_EQ(s.content, "<p>");
  EXPECT_EQ(s.reasoning, "");
}

TEST(ReasoningParserStreaming, EveryCutOfLongerOutputs) {
  const std::string text =
      "<think>\nFirst, 2+2. Tags like <b> and </thin and </ are not markers… 你好\n</think>\n\n"
      "Answer: 4. Trailing </think> and <think> stay.";
  expect_split("qwen3", kUnsetPrompt, text,
               "\nFirst, 2+2. Tags like <b> and </thin and </ are not markers… 你好\n",
               "\n\nAnswer: 4. Trailing </think> and <think> stay.");
  expect_split("deepseek_r1", kUnsetPrompt, text,
               "\nFirst, 2+2. Tags like <b> and </thin and </ are not markers… 你好\n",
               "\n\nAnswer: 4. Trailing </think> and <think> stay.");
  expect_split("deepseek_v3", kClosedPrompt, text, "", text);
}

TEST(ReasoningParserStreaming, ParseIgnoresStreamingState) {
  auto p = make("qwen3", kOpenPrompt);
  p->feed("abc</think>de");
  ReasoningSplit whole = p->parse("x</think>y");
  EXPECT_EQ(whole.reasoning, "x");
  EXPECT_EQ(whole.content, "y");
  ReasoningSplit s = p->feed("f");
  EXPECT_EQ(s.content, "f");
}

// ---- DeepSeek-V3.2 and V4 (prompts as their encoders end them) ----

constexpr std::string_view kDeepSeekThinking = "<｜User｜>Hi<｜Assistant｜><think>";
constexpr std::string_view kDeepSeekChat = "<｜User｜>Hi<｜Assistant｜></think>";
constexpr std::string_view kDeepSeekTurnEnd = "<｜Assistant｜>Hi<｜end▁of▁sentence｜>";
constexpr std::string_view kDsmlCalls =
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

TEST(ReasoningParserDeepSeekV32, ThinkingOnlyWhenThePromptOpenedIt) {
  expect_split("deepseek_v32", kDeepSeekThinking, "2+2=4</think>4", "2+2=4", "4");
  expect_split("deepseek_v32", kDeepSeekChat, "a</think>b", "", "a</think>b");
  expect_split("deepseek_v32", kDeepSeekTurnEnd, "a</think>b", "", "a</think>b");
}

TEST(ReasoningParserDeepSeekV4, ThinksUnlessThePromptClosedIt) {
  expect_split("deepseek_v4", kDeepSeekThinking, "2+2=4</think>4", "2+2=4", "4");
  expect_split("deepseek_v4", kDeepSeekChat, "a</think>b", "", "a</think>b");
  // Neither: vLLM's deepseek_v4 parser thinks by default.
  expect_split("deepseek_v4", kDeepSeekTurnEnd, "a</think>b", "a", "b");
  expect_split("deepseek_v4", kDeepSeekTurnEnd, "<think>a</think>b", "a", "b");
  expect_split("deepseek_v4", "", "still thinking", "still thinking", "");
}

TEST(ReasoningParserDeepSeekV4, ToolCallsEndReasoning) {
  const std::string calls(kDsmlCalls);
  expect_split("deepseek_v4", kDeepSeekThinking, "I need f.\n\n" + calls, "I need f.\n\n", calls);
  expect_split("deepseek_v4", kDeepSeekTurnEnd, calls, "", calls);
  // Whichever comes first ends reasoning; later markers are content.
  expect_split("deepseek_v4", kDeepSeekThinking, "r</think>c" + calls, "r", "c" + calls);
  expect_split("deepseek_v4", kDeepSeekThinking, "r" + calls + "</think>", "r", calls + "</think>");
  // A partial block marker at the end is plain reasoning text.
  expect_split("deepseek_v4", kDeepSeekThinking, "r<｜DSML｜tool", "r<｜DSML｜tool", "");
  // Only deepseek_v4 reads DSML blocks (V3.2's function_calls stay reasoning, as in vLLM).
  expect_split("deepseek_v32", kDeepSeekThinking, "r" + calls, "r" + calls, "");
  expect_split("deepseek_r1", kDeepSeekThinking, "r" + calls, "r" + calls, "");
}

TEST(ReasoningParserDeepSeekV4, HoldsBackAPossibleBlockMarker) {
  auto p = make("deepseek_v4", kDeepSeekThinking);
  ReasoningSplit s = p->feed("x <｜DSML｜");
  EXPECT_EQ(s.reasoning, "x ");
  s = p->feed("tool_calls>\n");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "<｜DSML｜tool_calls>\n");
  s = p->finish();
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "");
}

// ---- Names ----

TEST(ReasoningParserNames, KnownAndUnknown) {
  const auto& names = reasoning_parser_names();
  for (std::string_view want :
       {"qwen3", "deepseek_r1", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
    EXPECT_TRUE(make_reasoning_parser(want, "") != nullptr) << want;
  }
  for (std::string_view bad : {"", "qwen", "Qwen3", "deepseek", "deepseek_r1 ", "mistral"}) {
    EXPECT_TRUE(make_reasoning_parser(bad, "<think>") == nullptr) << bad;
  }
}

}  // namespace
}  // namespace kestrel::chat
