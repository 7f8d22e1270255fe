// `kestrel render-chat` end to end: JSON lines in, {"rendered"} / {"error"} lines out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/run_kestrel.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(RenderChatCli, RendersAndReportsErrorsPerLine) {
  const auto dir = std::filesystem::temp_directory_path() / "kestrel_render_chat_test";
  std::filesystem::create_directories(dir);
  const auto tmpl = dir / "t.jinja";
  std::ofstream(tmpl) << "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n"
                         "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
                         "{{ raise_exception('no messages') if not messages }}";
  const std::string input =
      R"({"context": {"messages": [{"role": "user", "content": " Hi "}], "add_generation_prompt": true}})"
      "\n"
      R"({"context": {"messages": []}})"
      "\nnot json\n";
  const test::CliRun r = test::run_kestrel("render-chat --template " + tmpl.string(), input);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], nlohmann::json({{"rendered", "<user>Hi\n<assistant>"}}));
  ASSERT_TRUE(out[1].contains("error"));
  EXPECT_NE(out[1]["error"].get<std::string>().find("no messages"), std::string::npos);
  EXPECT_TRUE(out[2].contains("error"));
}

TEST(RenderChatCli, TakesTheTemplateOfTheDefaultModel) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model");
  const test::CliRun r = test::run_kestrel(
      "render-chat --model " + model,
      R"({"context": {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}})"
      "\n");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["rendered"],
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(RenderChatCli, MissingTemplateIsAnError) {
  const test::CliRun r = test::run_kestrel("render-chat --template /no/such/file.jinja", "");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--chat-template"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kestrel
