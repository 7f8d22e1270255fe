#include "bench/compare_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/mmap_file.h"

namespace kestrel::bench {

namespace {

struct Row {
  const char* key;
  const char* label;
};

constexpr Row kRows[] = {
    {"completed", "Successful requests"},
    {"request_throughput", "Request throughput (req/s)"},
    {"output_throughput", "Output token throughput (tok/s)"},
    {"total_token_throughput", "Total token throughput (tok/s)"},
    {"mean_ttft_ms", "Mean TTFT (ms)"},
    {"median_ttft_ms", "Median TTFT (ms)"},
    {"p99_ttft_ms", "P99 TTFT (ms)"},
    {"mean_tpot_ms", "Mean TPOT (ms)"},
    {"median_tpot_ms", "Median TPOT (ms)"},
    {"p99_tpot_ms", "P99 TPOT (ms)"},
    {"mean_itl_ms", "Mean ITL (ms)"},
    {"median_itl_ms", "Median ITL (ms)"},
    {"p99_itl_ms", "P99 ITL (ms)"},
    {"mean_e2el_ms", "Mean E2EL (ms)"},
    {"p99_e2el_ms", "P99 E2EL (ms)"},
};

std::string cell(const nlohmann::json& result, const char* key) {
  const auto it = result.find(key);
  if (it == result.end() || !it->is_number()) return "-";
  return it->is_number_integer() ? std::to_string(it->get<int64_t>())
                                 : fmt::format("{:.2f}", it->get<double>());
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

// Per-request samples in milliseconds: TTFT from "ttfts"; TPOT as each request's mean gap of
// "itls" (the gaps between its tokens, so (E2EL − TTFT) / (output − 1) when one chunk is one
// token).
std::vector<double> samples_ms(const nlohmann::json& j, const std::string& metric) {
  std::vector<double> out;
  const auto it = j.find(metric == "ttft" ? "ttfts" : "itls");
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it) {
    if (metric == "ttft" && v.is_number()) out.push_back(v.get<double>() * 1000.0);
    if (metric == "tpot" && v.is_array() && !v.empty()) {
      double sum = 0;
      for (const auto& x : v) sum += x.is_number() ? x.get<double>() : 0.0;
      out.push_back(sum / double(v.size()) * 1000.0);
    }
  }
  return out;
}

// An empirical CDF per run in one SVG (x: milliseconds, y: fraction of samples).
std::string cdf_svg(const std::vector<SavedRun>& runs, const std::string& metric,
                    const std::string& title) {
  constexpr double kW = 560, kH = 300, kPad = 40;
  std::vector<std::vector<double>> series;
  double max_x = 0;
  for (const SavedRun& r : runs) {
    std::vector<double> v = samples_ms(r.result, metric);
    std::sort(v.begin(), v.end());
    if (!v.empty()) max_x = std::max(max_x, v.back());
    series.push_back(std::move(v));
  }
  std::ostringstream svg;
  svg << "<h2>" << escape_html(title) << "</h2>\n<svg width=\"" << kW << "\" height=\"" << kH
      << "\" xmlns=\"http://www.w3.org/2000/svg\">"
      << fmt::format(
             "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
             "stroke=\"#888\"/>",
             kPad, 10, kW - kPad - 10, kH - kPad - 10)
      << fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">0</text>", kPad, kH - kPad + 14)
      << fmt::format(
             "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.1f} ms</text>",
             kW - 10, kH - kPad + 14, max_x)
      << fmt::format("<text x=\"4\" y=\"16\" font-size=\"11\">1.0</text>");
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& v = series[i];
    if (v.empty() || max_x <= 0) continue;
    std::ostringstream pts;
    for (size_t k = 0; k < v.size(); ++k) {
      const double x = kPad + v[k] / max_x * (kW - kPad - 10);
      const double y = (kH - kPad) - double(k + 1) / double(v.size()) * (kH - kPad - 10);
      pts << fmt::format("{:.1f},{:.1f} ", x, y);
    }
    svg << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << kColors[i % 6]
        << "\" points=\"" << pts.str() << "\"/>";
  }
  svg << "</svg>\n";
  return svg.str();
}

// Output throughput against max concurrency, one point per run.
std::string throughput_svg(const std::vector<SavedRun>& runs) {
  constexpr double kW = 560, kH = 300, kPad = 40;
  double max_c = 1, max_t = 1;
  for (const SavedRun& r : runs) {
    const auto c = r.result.find("max_concurrency");
    if (c != r.result.end() && c->is_number()) max_c = std::max(max_c, c->get<double>());
    const auto t = r.result.find("output_throughput");
    if (t != r.result.end() && t->is_number()) max_t = std::max(max_t, t->get<double>());
  }
  std::ostringstream svg;
  svg << "<h2>Output throughput vs max concurrency</h2>\n<svg width=\"" << kW << "\" height=\""
      << kH << "\" xmlns=\"http://www.w3.org/2000/svg\">"
      << fmt::format(
             "<rect x=\"{}\" y=\"10\" width=\"{}\" height=\"{}\" fill=\"none\" "
             "stroke=\"#888\"/>",
             kPad, kW - kPad - 10, kH - kPad - 10)
      << fmt::format(
             "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.0f} "
             "concurrent</text>",
             kW - 10, kH - kPad + 14, max_c)
      << fmt::format("<text x=\"4\" y=\"16\" font-size=\"11\">{:.1f} tok/s</text>", max_t);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto c = runs[i].result.find("max_concurrency");
    const auto t = runs[i].result.find("output_throughput");
    if (c == runs[i].result.end() || !c->is_number() || t == runs[i].result.end() ||
        !t->is_number())
      continue;
    const double x = kPad + c->get<double>() / max_c * (kW - kPad - 10);
    const double y = (kH - kPad) - t->get<double>() / max_t * (kH - kPad - 10);
    svg << fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"{}\"/>", x, y,
                       kColors[i % 6]);
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace

Expected<SavedRun> load_saved_run(const std::string& path) {
  KASSIGN(std::string text, read_text_file(path));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error("{}: not a JSON object (a bench serve --save-result file)", path);
  if (!j.contains("completed") || !j.contains("output_throughput"))
    return make_error("{}: no completed/output_throughput keys; not a bench serve result", path);
  SavedRun run;
  const auto label = j.find("label");
  run.name = label != j.end() && label->is_string() && !label->get<std::string>().empty()
                 ? label->get<std::string>()
                 : std::filesystem::path(path).filename().string();
  run.result = std::move(j);
  return run;
}

std::string comparison_table(const std::vector<SavedRun>& runs) {
  std::string out = fmt::format("{:<34}", "");
  for (const SavedRun& r : runs) out += fmt::format(" {:>18}", r.name.substr(0, 18));
  out += "\n";
  for (const Row& row : kRows) {
    const bool any = std::any_of(runs.begin(), runs.end(),
                                 [&](const SavedRun& r) { return cell(r.result, row.key) != "-"; });
    if (!any) continue;
    out += fmt::format("{:<34}", row.label);
    for (const SavedRun& r : runs) out += fmt::format(" {:>18}", cell(r.result, row.key));
    out += "\n";
  }
  return out;
}

std::string comparison_html(const std::vector<SavedRun>& runs) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kestrel bench compare"
          "</title><style>body{font-family:sans-serif}td,th{padding:2px 10px;text-align:right}"
          "td:first-child{text-align:left}</style></head><body>\n<h1>Benchmark comparison</h1>\n"
          "<table><tr><th></th>";
  for (size_t i = 0; i < runs.size(); ++i)
    html << "<th style=\"color:" << kColors[i % 6] << "\">" << escape_html(runs[i].name) << "</th>";
  html << "</tr>\n";
  for (const Row& row : kRows) {
    html << "<tr><td>" << row.label << "</td>";
    for (const SavedRun& r : runs) html << "<td>" << cell(r.result, row.key) << "</td>";
    html << "</tr>\n";
  }
  html << "</table>\n"
       << cdf_svg(runs, "ttft", "TTFT CDF") << cdf_svg(runs, "tpot", "TPOT CDF (per request)")
       << throughput_svg(runs) << "</body></html>\n";
  return html.str();
}

}  // namespace kestrel::bench
