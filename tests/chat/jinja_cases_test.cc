// Engine features on small templates, against outputs Python jinja2 produced
// (tests/chat/jinja_cases.json, written by tools/make_jinja_cases.py).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

TEST(JinjaCases, MatchJinja2) {
  std::ifstream f(test::source_dir() + "/tests/chat/jinja_cases.json");
  ASSERT_TRUE(f) << "missing tests/chat/jinja_cases.json";
  const auto doc = nlohmann::ordered_json::parse(f);
  int n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    auto got = render(c.at("template").get<std::string>(), c.at("context"));
    if (c.contains("error")) {
      EXPECT_FALSE(got.ok()) << name << " should fail like jinja2 (" << c.at("error")
                             << ") but rendered: " << (got.ok() ? *got : "");
    } else {
      ASSERT_TRUE(got.ok()) << name << ": " << got.error().message;
      EXPECT_EQ(*got, c.at("expected").get<std::string>()) << name;
    }
    ++n;
  }
  EXPECT_GT(n, 100);
}

}  // namespace
}  // namespace kestrel::chat
