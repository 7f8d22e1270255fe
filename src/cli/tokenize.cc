// kestrel tokenize — JSON lines in, token ids out: {"text": ...} on stdin becomes
// {"ids": [...], "decoded": ...} on stdout, for checking a tokenizer against a reference.
#include <CLI/CLI.hpp>

#include <chrono>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

// Ordered, so that "ids" comes before "decoded" as documented.
using Json = nlohmann::ordered_json;

void print_line(const Json& j) {
  // Decoded text can hold invalid UTF-8 (the tokens of invalid input bytes); it is written
  // with U+FFFD rather than failing the line.
  std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// Time spent in encode() and the bytes it read, for --stats.
struct EncodeStats {
  double seconds = 0;
  size_t bytes = 0;
};

Json tokenize_line(const Tokenizer& tok, const std::string& line, bool add_special_tokens,
                   EncodeStats& stats) {
  const Json in = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded()) return {{"error", "line is not valid JSON"}};
  if (!in.is_object() || !in.contains("text") || !in["text"].is_string()) {
    return {{"error", "expected an object with a string \"text\""}};
  }
  const std::string& text = in["text"].get_ref<const std::string&>();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, add_special_tokens);
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.bytes += text.size();
  return {{"ids", ids}, {"decoded", tok.decode(ids, /*skip_special_tokens=*/false)}};
}

int run_tokenize(int argc, char** argv) {
  std::string path;
  bool no_special = false;
  bool stats_flag = false;
  CLI::App app{"Tokenize JSON lines {\"text\": ...} from stdin into {\"ids\", \"decoded\"} lines.",
               "kestrel tokenize"};
  app.add_option("--tokenizer", path, "model directory with tokenizer.json, or a .gguf file")
      ->required();
  app.add_flag("--no-special-tokens", no_special, "do not add BOS/EOS tokens");
  app.add_flag("--stats", stats_flag, "print encode throughput (encode calls only) on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto tok = load_tokenizer(path);
  if (!tok) {
    std::fprintf(stderr, "error: %s\n", tok.error().message.c_str());
    return 1;
  }
  EncodeStats stats;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    print_line(tokenize_line(**tok, line, !no_special, stats));
  }
  if (stats_flag) {
    std::fprintf(stderr, "encoded %zu bytes in %.4f s: %.2f MB/s\n", stats.bytes, stats.seconds,
                 stats.seconds > 0 ? double(stats.bytes) / stats.seconds / 1e6 : 0.0);
  }
  return 0;
}

KESTREL_COMMAND("tokenize", "tokenize JSON lines of text with a model's tokenizer", run_tokenize);

}  // namespace
}  // namespace kestrel::cli
