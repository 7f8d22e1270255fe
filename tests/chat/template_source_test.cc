// find_chat_template: precedence of the sources and the real files they are read from.
#include "chat/template_source.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/mmap_file.h"
#include "chat/chat_template.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kestrel_tmpl_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(TemplateSource, PrecedenceOfSources) {
  const fs::path d = fresh_dir("prec");
  std::ofstream(d / "tokenizer_config.json") << R"({"chat_template": "from-config {{ x }}"})";
  auto t = find_chat_template(d.string());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t, "from-config {{ x }}");
  std::ofstream(d / "chat_template.jinja") << "from-jinja-file";
  t = find_chat_template(d.string());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "from-jinja-file");
  std::ofstream(d / "override.jinja") << "from-override";
  t = find_chat_template(d.string(), (d / "override.jinja").string());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "from-override");
  t = find_chat_template(d.string(), "{{ 'inline' }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "{{ 'inline' }}");
  t = find_chat_template(d.string(), "/no/such/template.jinja");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("--chat-template"), std::string::npos);
}

TEST(TemplateSource, NamedTemplateListAndMissingTemplate) {
  const fs::path d = fresh_dir("list");
  std::ofstream(d / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                {"name": "default", "template": "D"}]})";
  auto t = find_chat_template(d.string());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "D");
  std::ofstream(d / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  t = find_chat_template(d.string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("no chat template"), std::string::npos);
}

TEST(TemplateSource, SharedTokenizerConfigsHoldTheSharedTemplates) {
  for (auto [dir, file] : {std::pair{"qwen3", "qwen3.jinja"},
                           {"deepseek_v3", "deepseek-v3.jinja"},
                           {"gemma3", "gemma3.jinja"},
                           {"llama3_1", "llama3.1.jinja"}}) {
    const std::string tok = test::shared_dir() + "/testdata/tokenizers/" + dir;
    KESTREL_SKIP_IF_ABSENT(tok, "the shared tokenizer");
    auto t = find_chat_template(tok);
    ASSERT_TRUE(t.ok()) << t.error().message;
    auto want = read_text_file(test::shared_dir() + "/testdata/chat_templates/" + file);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(*t, *want) << dir;
  }
}

// The default model's GGUF template renders every smollm2 golden conversation as jinja2 does.
TEST(TemplateSource, DefaultModelGgufTemplateMatchesJinja2Goldens) {
  const std::string model = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(model, "the default model");
  auto source = find_chat_template(model);
  ASSERT_TRUE(source.ok()) << source.error().message;
  auto tmpl = ChatTemplate::parse(*source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  const std::string goldens_path = test::shared_dir() + "/testdata/goldens/chat_templates.jsonl";
  KESTREL_SKIP_IF_ABSENT(goldens_path, "the shared chat template goldens");
  auto goldens = read_text_file(goldens_path);
  ASSERT_TRUE(goldens.ok()) << goldens.error().message;
  std::istringstream lines(*goldens);
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto g = nlohmann::ordered_json::parse(line);
    if (g["template"] != "smollm2.jinja") continue;
    auto out = tmpl->render(g["context"]);
    if (g.value("error", false)) {
      EXPECT_FALSE(out.ok()) << g["case"];
    } else {
      ASSERT_TRUE(out.ok()) << g["case"] << ": " << out.error().message;
      EXPECT_EQ(*out, g["expected"].get<std::string>()) << g["case"];
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace kestrel::chat
