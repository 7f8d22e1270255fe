// Renders every line of goldens/chat_templates.jsonl (jinja2 3.1.6 configured as transformers
// configures it) and demands an exact match, or an error where jinja2 raised.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, AllCasesMatchJinja2) {
  const std::string dir = test::shared_dir() + "/testdata";
  KESTREL_SKIP_IF_ABSENT(dir + "/goldens/chat_templates.jsonl", "the shared chat template goldens");
  std::ifstream lines(dir + "/goldens/chat_templates.jsonl");
  ASSERT_TRUE(lines) << "cannot read " << dir << "/goldens/chat_templates.jsonl";
  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, std::pair<int, int>> tally;  // template → (passed, total)
  std::string line;
  int total = 0, passed = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::ordered_json::parse(line);
    const std::string name = j.at("template");
    if (!templates.count(name)) {
      auto t = ChatTemplate::parse(read_file(dir + "/chat_templates/" + name));
      ASSERT_TRUE(t.ok()) << name << ": " << t.error().message;
      templates.emplace(name, std::move(t.value()));
    }
    const auto got = templates.at(name).render(j.at("context"));
    const std::string where = name + " / " + j.at("case").get<std::string>();
    bool ok;
    if (j.value("error", false)) {
      ok = !got.ok();
      EXPECT_FALSE(got.ok()) << where << ": expected " << j.at("error_message")
                             << ", rendered: " << (got.ok() ? *got : "");
    } else {
      ok = got.ok() && *got == j.at("expected").get<std::string>();
      if (!got.ok()) {
        ADD_FAILURE() << where << ": " << got.error().message;
      } else {
        EXPECT_EQ(*got, j.at("expected").get<std::string>()) << where;
      }
    }
    ++total;
    passed += ok;
    tally[name].first += ok;
    tally[name].second += 1;
  }
  for (const auto& [name, t] : tally)
    std::printf("  %-26s %d/%d\n", name.c_str(), t.first, t.second);
  EXPECT_EQ(total, 288);
  EXPECT_EQ(passed, total);
}

}  // namespace
}  // namespace kestrel::chat
