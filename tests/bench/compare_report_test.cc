// bench compare: the table lines up runs and marks missing metrics; the HTML report holds one
// curve per run in each CDF, one point per run in the throughput plot, escapes names, and needs
// no script; malformed files are refused with the file named.
#include "bench/compare_report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kestrel::bench {
namespace {

SavedRun run(const std::string& name, double throughput, int concurrency, bool with_tpot) {
  SavedRun r;
  r.name = name;
  r.result = {{"completed", 3},
              {"request_throughput", 1.5},
              {"output_throughput", throughput},
              {"mean_ttft_ms", 120.25},
              {"max_concurrency", concurrency},
              {"ttfts", {0.1, 0.2, 0.3}},
              {"itls", {{0.01, 0.03}, {0.02}, nlohmann::json::array()}}};
  if (with_tpot) r.result["mean_tpot_ms"] = 20.0;
  return r;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(CompareReport, TableLinesUpRunsAndMarksMissingMetrics) {
  const std::string table =
      comparison_table({run("kestrel", 55.5, 8, true), run("other", 40, 8, false)});
  EXPECT_NE(table.find("kestrel"), std::string::npos);
  EXPECT_NE(table.find("other"), std::string::npos);
  EXPECT_NE(table.find("55.50"), std::string::npos);
  EXPECT_NE(table.find("40.00"), std::string::npos);
  EXPECT_NE(table.find("120.25"), std::string::npos);
  // Mean TPOT is in the first run only.
  const size_t tpot = table.find("Mean TPOT (ms)");
  ASSERT_NE(tpot, std::string::npos);
  const std::string line = table.substr(tpot, table.find('\n', tpot) - tpot);
  EXPECT_NE(line.find("20.00"), std::string::npos);
  EXPECT_NE(line.find(" -"), std::string::npos);
  // Metrics no run has are left out.
  EXPECT_EQ(table.find("P99 E2EL"), std::string::npos);
}

TEST(CompareReport, HtmlHasACurvePerRunAndNoScript) {
  const std::string html = comparison_html({run("a<b>", 55.5, 8, true), run("c", 40, 32, true)});
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("a&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("a<b>"), std::string::npos);
  // Two CDF plots (TTFT, TPOT) × two runs, and one throughput point per run.
  EXPECT_EQ(count(html, "<polyline"), 4u);
  EXPECT_EQ(count(html, "<circle"), 2u);
  EXPECT_NE(html.find("TTFT CDF"), std::string::npos);
  EXPECT_NE(html.find("TPOT CDF"), std::string::npos);
  // TPOT per request is the mean of its gaps: 20 ms and 20 ms, the empty one skipped; the TTFT
  // axis ends at the slowest request, 300 ms.
  EXPECT_NE(html.find("300.0 ms"), std::string::npos);
  EXPECT_NE(html.find("20.0 ms"), std::string::npos);
}

TEST(CompareReport, LoadRefusesWhatIsNotAResult) {
  const auto dir = std::filesystem::temp_directory_path() / "kestrel_compare_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "bad.json") << "{not json";
  std::ofstream(dir / "other.json") << R"({"hello": 1})";
  std::ofstream(dir / "good.json") << R"({"completed": 2, "output_throughput": 9.5, "label": "L"})";
  auto bad = load_saved_run((dir / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.json"), std::string::npos);
  EXPECT_FALSE(load_saved_run((dir / "other.json").string()).ok());
  EXPECT_FALSE(load_saved_run((dir / "missing.json").string()).ok());
  auto good = load_saved_run((dir / "good.json").string());
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->name, "L");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kestrel::bench
