// bench/compare_report.h — `kestrel bench compare`: several `bench serve --save-result` files side
// by side, as a text table and as a self-contained HTML page with inline SVG plots (TTFT and TPOT
// CDFs, output throughput against max concurrency) that needs no script or download to view.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel::bench {

struct SavedRun {
  std::string name;  // the run's label, else its file name
  nlohmann::json result;
};

// Reads one saved result; errors name the file and what is wrong with it.
Expected<SavedRun> load_saved_run(const std::string& path);

// One row per metric (throughputs, mean/median/p99 TTFT, TPOT, ITL, E2EL where present), one
// column per run; "-" where a run lacks the metric.
std::string comparison_table(const std::vector<SavedRun>& runs);

std::string comparison_html(const std::vector<SavedRun>& runs);

}  // namespace kestrel::bench
