// kestrel quantize — a bf16/f16/f32 safetensors checkpoint into an msModelSlim W8A8_DYNAMIC one,
// or a W8A8 one whose static activation ranges come from a calibration file (model/quantize.h),
// which `kestrel serve` reads with or without --quantization ascend.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "model/quantize.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

// One sample per non-empty line: a JSON array of token ids as it is, any other line as text for
// the checkpoint's tokenizer (with its special tokens, as a completion prompt).
Expected<std::vector<std::vector<int32_t>>> read_calibration(const std::string& path,
                                                             const std::string& model) {
  std::ifstream in(path);
  if (!in) return make_error("--calibration-file {}: cannot be read", path);
  std::vector<std::vector<int32_t>> samples;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json ids = nlohmann::json::parse(line, nullptr, false);
    if (ids.is_array()) {
      std::vector<int32_t>& s = samples.emplace_back();
      for (const nlohmann::json& id : ids) {
        if (!id.is_number_integer())
          return make_error("--calibration-file {} line {}: token ids must be integers", path,
                            number);
        s.push_back(id.get<int32_t>());
      }
      continue;
    }
    if (!tokenizer) {
      Expected<std::unique_ptr<Tokenizer>> t = load_tokenizer(model);
      if (!t.ok())
        return make_error(
            "--calibration-file {} line {} is text, and '{}' has no tokenizer ({}); give token "
            "ids as JSON arrays",
            path, number, model, t.error().message);
      tokenizer = std::move(*t);
    }
    samples.push_back(tokenizer->encode(line, true));
  }
  if (samples.empty()) return make_error("--calibration-file {}: no samples", path);
  return samples;
}

int run_quantize(int argc, char** argv) {
  QuantizeOptions o;
  std::string calibration_file;
  CLI::App app{
      "Quantize a float safetensors checkpoint into msModelSlim's format: W8A8_DYNAMIC (int8 "
      "weights with a scale per row, activations quantized per token when served), W8A8 "
      "(activations quantized with one static scale and offset per linear, calibrated on "
      "--calibration-file) or W4A8_DYNAMIC (a MoE model's routed experts as int4).",
      "kestrel quantize"};
  app.add_option("model", o.input, "model directory (config.json and *.safetensors)")->required();
  app.add_option("--output,-o", o.output, "directory to write (new or empty)")->required();
  app.add_option("--quant-type", o.quant_type,
                 "W8A8_DYNAMIC (default) | W8A8 | W4A8_DYNAMIC (MoE experts int4, the rest "
                 "W8A8_DYNAMIC)");
  app.add_option("--calibration-file", calibration_file,
                 "W8A8: one calibration sample per line, text or a JSON array of token ids "
                 "(e.g. a few hundred lines of the text the model will serve)");
  app.add_option("--threads,-t", o.threads, "threads of the calibration run (0 = all cores)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!calibration_file.empty()) {
    if (o.quant_type != "W8A8") {
      std::fprintf(stderr, "kestrel quantize: --calibration-file is for --quant-type W8A8\n");
      return 2;
    }
    Expected<std::vector<std::vector<int32_t>>> samples =
        read_calibration(calibration_file, o.input);
    if (!samples.ok()) {
      std::fprintf(stderr, "kestrel quantize: %s\n", samples.error().message.c_str());
      return 1;
    }
    o.calibration = std::move(*samples);
  }
  const Expected<QuantizeReport> r = quantize_checkpoint(o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  std::printf(
      "%s: %lld weights quantized to int8 (%lld with static activations, %lld int4), %lld "
      "tensors kept; %.1f MB -> %.1f MB\n",
      o.output.c_str(), static_cast<long long>(r->quantized),
      static_cast<long long>(r->quantized_static), static_cast<long long>(r->quantized_int4),
      static_cast<long long>(r->kept), double(r->bytes_in) / 1e6, double(r->bytes_out) / 1e6);
  return 0;
}

}  // namespace

KESTREL_COMMAND("quantize",
                "quantize a float checkpoint into msModelSlim's W8A8_DYNAMIC, W8A8 or W4A8 format",
                run_quantize);

}  // namespace kestrel::cli
