// `kestrel render-chat` end to end: JSON lines in, {"rendered"} / {"error"} lines out.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace kestrel {
namespace {

TEST(RenderChatCli, RendersAndReportsErrorsPerLine) {
  if (!std::filesystem::exists(test::kestrel_binary())) GTEST_SKIP() << "kestrel not built";
  const auto dir = std::filesystem::temp_directory_path() / "kestrel_render_chat_test";
  std::filesystem::create_directories(dir);
  const auto tmpl = dir / "t.jinja";
  const auto input = dir / "in.jsonl";
  std::ofstream(tmpl) << "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n"
                         "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
                         "{{ raise_exception('no messages') if not messages }}";
  std::ofstream(input)
      << R"({"context": {"messages": [{"role": "user", "content": " Hi "}], "add_generation_prompt": true}})"
      << "\n"
      << R"({"context": {"messages": []}})"
      << "\n"
      << "not json\n";
  const std::string cmd =
      test::kestrel_binary() + " render-chat --template " + tmpl.string() + " < " + input.string();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ASSERT_EQ(pclose(p), 0);
  std::istringstream lines(out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line), nlohmann::json({{"rendered", "<user>Hi\n<assistant>"}}));
  ASSERT_TRUE(std::getline(lines, line));
  const auto second = nlohmann::json::parse(line);
  ASSERT_TRUE(second.contains("error"));
  EXPECT_NE(second["error"].get<std::string>().find("no messages"), std::string::npos);
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_TRUE(nlohmann::json::parse(line).contains("error"));
  EXPECT_FALSE(std::getline(lines, line));
}

}  // namespace
}  // namespace kestrel
