// kestrel quantize — a bf16/f16/f32 safetensors checkpoint into an msModelSlim W8A8_DYNAMIC one
// (model/quantize.h), which `kestrel serve` reads with or without --quantization ascend.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "model/quantize.h"

namespace kestrel::cli {
namespace {

int run_quantize(int argc, char** argv) {
  QuantizeOptions o;
  std::string type = "W8A8_DYNAMIC";
  CLI::App app{
      "Quantize a float safetensors checkpoint into msModelSlim's W8A8_DYNAMIC format (int8 "
      "weights with a scale per row, activations quantized per token when served).",
      "kestrel quantize"};
  app.add_option("model", o.input, "model directory (config.json and *.safetensors)")->required();
  app.add_option("--output,-o", o.output, "directory to write (new or empty)")->required();
  app.add_option("--quant-type", type, "W8A8_DYNAMIC (the only one so far)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (type != "W8A8_DYNAMIC") {
    std::fprintf(stderr,
                 "kestrel quantize: --quant-type %s is not supported (W8A8_DYNAMIC; static "
                 "W8A8 with calibration is planned, issue 23)\n",
                 type.c_str());
    return 2;
  }
  const Expected<QuantizeReport> r = quantize_checkpoint(o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  std::printf("%s: %lld weights quantized to int8, %lld tensors kept; %.1f MB -> %.1f MB\n",
              o.output.c_str(), static_cast<long long>(r->quantized),
              static_cast<long long>(r->kept), double(r->bytes_in) / 1e6,
              double(r->bytes_out) / 1e6);
  return 0;
}

}  // namespace

KESTREL_COMMAND("quantize", "quantize a float checkpoint into msModelSlim's W8A8_DYNAMIC format",
                run_quantize);

}  // namespace kestrel::cli
