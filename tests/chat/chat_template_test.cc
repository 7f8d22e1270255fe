// ChatTemplate API behaviour: error positions, reuse across renders and threads, limits on
// hostile templates, and JSON context handling.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

TEST(ChatTemplate, SyntaxErrorCarriesLineAndColumn) {
  auto t = ChatTemplate::parse("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("line 3, column 10"), std::string::npos) << t.error().message;
}

TEST(ChatTemplate, UnterminatedTagFails) {
  EXPECT_FALSE(ChatTemplate::parse("{{ x ").ok());
  EXPECT_FALSE(ChatTemplate::parse("{% for x in y %}").ok());
  EXPECT_FALSE(ChatTemplate::parse("{# never closed").ok());
  EXPECT_FALSE(ChatTemplate::parse("{{ 'open string }}").ok());
  EXPECT_FALSE(ChatTemplate::parse("{% break %}").ok());
}

TEST(ChatTemplate, RuntimeErrorCarriesLineAndMessage) {
  auto t = ChatTemplate::parse("ok\n\n  {{- raise_exception('bad role: ' ~ role) }}");
  ASSERT_TRUE(t.ok());
  auto r = t->render(ojson{{"role", "tool"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 3"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bad role: tool"), std::string::npos) << r.error().message;
}

TEST(ChatTemplate, ParseOnceRenderMany) {
  auto t = ChatTemplate::parse("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}");
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 3; ++i) {
    ojson ctx;
    ctx["messages"] = ojson::array({{{"role", "user"}, {"content", std::to_string(i)}}});
    auto r = t->render(ctx);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, "[user:" + std::to_string(i) + "]");
  }
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      ojson ctx;
      ctx["xs"] = ojson::array();
      for (int i = 0; i <= 100 * (k + 1); ++i) ctx["xs"].push_back(i);
      for (int rep = 0; rep < 20; ++rep) {
        auto r = t->render(ctx);
        results[k] = r.ok() ? *r : r.error().message;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    const int n = 100 * (k + 1);
    EXPECT_EQ(results[k], std::to_string(n * (n + 1) / 2));
  }
}

TEST(ChatTemplate, KeyOrderFollowsOrderedJson) {
  ojson ctx;
  ctx["d"] = ojson::object();
  ctx["d"]["zeta"] = 1;
  ctx["d"]["alpha"] = 2;
  auto r = render("{{ d|tojson }} {{ d }}", ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "{\"zeta\": 1, \"alpha\": 2} {'zeta': 1, 'alpha': 2}");
}

TEST(ChatTemplate, StrftimeNowFormatsLocalTime) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char year[16];
  std::strftime(year, sizeof(year), "%Y", &local);
  auto r = render("{{ strftime_now('%Y') }}", ojson::object());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, year);
}

TEST(ChatTemplate, ContextMustBeObject) {
  EXPECT_FALSE(render("x", ojson::array()).ok());
  EXPECT_FALSE(render("x", nlohmann::json(3)).ok());
}

TEST(ChatTemplate, ExponentialMacroRecursionHitsStepLimit) {
  auto t = ChatTemplate::parse(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
      "{{ f(40) }}");
  ASSERT_TRUE(t.ok());
  Limits limits;
  limits.max_steps = 100000;
  auto r = t->render(ojson::object(), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("too long"), std::string::npos) << r.error().message;
}

TEST(ChatTemplate, InfiniteMacroRecursionFails) {
  auto r = render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", ojson::object());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nested too deeply"), std::string::npos) << r.error().message;
}

TEST(ChatTemplate, HugeOutputFails) {
  Limits limits;
  limits.max_output_bytes = 1 << 20;
  auto t = ChatTemplate::parse("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ojson::object(), limits).ok());
  EXPECT_FALSE(render("{{ 'x' * 10000000000 }}", ojson::object()).ok());
  limits.max_collection = 1 << 16;
  auto big_range = ChatTemplate::parse("{{ range(10000000000)|length }}");
  ASSERT_TRUE(big_range.ok());
  EXPECT_FALSE(big_range->render(ojson::object(), limits).ok());
  auto small_range = ChatTemplate::parse("{{ range(1000)|length }}");
  ASSERT_TRUE(small_range.ok());
  auto r = small_range->render(ojson::object(), limits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "1000");
}

TEST(ChatTemplate, DeepNestingFailsCleanly) {
  std::string deep(5000, '(');
  EXPECT_FALSE(ChatTemplate::parse("{{ " + deep + " }}").ok());
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_FALSE(ChatTemplate::parse(chain + " }}").ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(ifs).ok());
}

}  // namespace
}  // namespace kestrel::chat
