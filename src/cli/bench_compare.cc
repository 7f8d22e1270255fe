// kestrel bench compare A.json B.json … — saved `bench serve` results side by side: a table on
// stdout and, with --html, a self-contained report with plots.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include "bench/compare_report.h"
#include "cli/commands.h"

namespace kestrel::cli {

namespace {

int run_bench_compare(int argc, char** argv) {
  std::vector<std::string> files;
  std::string html = "bench_compare.html";
  CLI::App app{"Compare saved bench serve results (--save-result files).", "kestrel bench compare"};
  app.add_option("results", files, "result JSON files")->required()->check(CLI::ExistingFile);
  app.add_option("--html", html, "where to write the HTML report (empty: none)");
  CLI11_PARSE(app, argc, argv);
  std::vector<bench::SavedRun> runs;
  for (const std::string& f : files) {
    auto run = bench::load_saved_run(f);
    if (!run.ok()) {
      std::fprintf(stderr, "kestrel bench compare: error: %s\n", run.error().message.c_str());
      return 1;
    }
    runs.push_back(std::move(*run));
  }
  std::printf("%s", bench::comparison_table(runs).c_str());
  if (!html.empty()) {
    std::ofstream out(html);
    out << bench::comparison_html(runs);
    if (!out) {
      std::fprintf(stderr, "kestrel bench compare: error: cannot write %s\n", html.c_str());
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", html.c_str());
  }
  return 0;
}

KESTREL_COMMAND("bench compare", "compare saved bench serve results (table and HTML report)",
                run_bench_compare);

}  // namespace

}  // namespace kestrel::cli
