// kestrel bench kl -m MODEL -f TEXT — a configuration's next-token distributions against a
// reference configuration's over a text, as llama-perplexity --kl-divergence measures a quantized
// model against its base: the text in chunks of --ctx tokens (a chunk's first token replaced by
// BOS where the model has one), each chunk one prefill, the second half of every chunk scored.
// The default compares the int8 activation path (--quant-compute int8) with the dequantized
// reference (f32 activations) on the same weights; --kv-cache-dtype against
// --reference-kv-cache-dtype measures a KV cache format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <vector>

#include "base/mmap_file.h"
#include "bench/kl_divergence.h"
#include "cli/commands.h"
#include "model/batch_builder.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

constexpr int kBlock = 16;

struct Side {
  std::unique_ptr<LoadedModel> lm;
  KVCacheStorage kv;
};

Expected<Side> load_side(LoadOptions o, int ctx) {
  KASSIGN(auto lm, load_model(o));
  KVCacheStorage kv = lm->model->make_kv_cache(ctx / kBlock + 1, kBlock);
  return Side{std::move(lm), std::move(kv)};
}

// [ids.size(), vocab] logits of one chunk run as one prefill from position 0.
std::vector<float> chunk_logits(Side& s, const std::vector<int32_t>& ids) {
  const int64_t V = s.lm->config.vocab_size;
  std::vector<int32_t> table(ids.size() / kBlock + 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  BatchBuilder bb(kBlock, s.kv.num_groups());
  bb.add(ids, 0, table, BatchBuilder::Logits::kAll);
  std::vector<float> out(ids.size() * size_t(V));
  s.lm->model->forward(bb.batch(), s.kv, out.data());
  return out;
}

int run_bench_kl(int argc, char** argv) {
  LoadOptions test, ref;
  std::string text_file, reference_model;
  int ctx = 512, chunks = 0, threads = 0;
  CLI::App app{"KL divergence of next-token distributions against a reference configuration.",
               "kestrel bench kl"};
  app.add_option("-m,--model", test.model, "model directory or .gguf file")->required();
  app.add_option("-f,--file", text_file, "text to score")->required()->check(CLI::ExistingFile);
  app.add_option("--ctx", ctx, "tokens per chunk (the second half of each is scored)")
      ->check(CLI::Range(16, 1 << 16));
  app.add_option("--chunks", chunks, "chunks to score (0: every whole chunk of the text)");
  app.add_option("-t,--threads", threads, "compute threads (0: all cores)");
  app.add_option("--quant-compute", test.quant_compute, "int8 | f32");
  app.add_option("--kv-cache-dtype", test.kv_cache_dtype, "KV cache dtype (as kestrel serve)");
  app.add_flag("--calculate-kv-scales", test.calculate_kv_scales,
               "FP8 scales from the first batch");
  app.add_option("--dtype", test.dtype, "activation dtype (as kestrel serve)");
  app.add_option("--reference-model", reference_model, "the reference's weights (default: -m)");
  ref.quant_compute = "f32";
  app.add_option("--reference-quant-compute", ref.quant_compute, "int8 | f32 (default f32)");
  app.add_option("--reference-kv-cache-dtype", ref.kv_cache_dtype, "the reference's KV cache");
  app.add_option("--reference-dtype", ref.dtype, "the reference's activation dtype");
  CLI11_PARSE(app, argc, argv);
  test.threads = ref.threads = threads;
  ref.model = reference_model.empty() ? test.model : reference_model;

  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "kestrel bench kl: error: %s\n", what.c_str());
    return 1;
  };
  auto text = read_text_file(text_file);
  if (!text.ok()) return fail(text.error().message);
  auto tok = load_tokenizer(test.model);
  if (!tok.ok()) return fail(tok.error().message);
  const std::vector<int32_t> ids = (*tok)->encode(*text, false);
  const int64_t whole = int64_t(ids.size()) / ctx;
  if (whole == 0) return fail("the text is shorter than one chunk of --ctx tokens");
  const int64_t n_chunks = chunks > 0 ? std::min<int64_t>(chunks, whole) : whole;

  auto t = load_side(test, ctx);
  if (!t.ok()) return fail(t.error().message);
  auto r = load_side(ref, ctx);
  if (!r.ok()) return fail(r.error().message);
  const int64_t V = t->lm->config.vocab_size;
  if (r->lm->config.vocab_size != V) return fail("the two models' vocabularies differ");

  bench::KlStats stats;
  const std::optional<int32_t> bos = (*tok)->bos_id();
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * ctx, ids.begin() + (c + 1) * ctx);
    if (bos) chunk[0] = *bos;
    const std::vector<float> lt = chunk_logits(*t, chunk), lr = chunk_logits(*r, chunk);
    for (int p = ctx / 2; p < ctx - 1; ++p)
      bench::add_position(stats, std::span<const float>(&lr[size_t(p) * V], size_t(V)),
                          std::span<const float>(&lt[size_t(p) * V], size_t(V)),
                          chunk[size_t(p) + 1]);
    std::fprintf(stderr, "chunk %lld/%lld: mean KL %.6f, top-1 %.2f %%\n", (long long)(c + 1),
                 (long long)n_chunks, stats.mean_kl(), 100 * stats.top1_agreement());
  }
  std::printf(
      "{\"positions\": %lld, \"mean_kl\": %.6g, \"kl_stderr\": %.3g, \"max_kl\": %.6g, "
      "\"top1_agreement\": %.6f, \"ppl_reference\": %.6f, \"ppl\": %.6f}\n",
      (long long)stats.positions, stats.mean_kl(), stats.kl_stderr(), stats.kl_max,
      stats.top1_agreement(), stats.ppl_ref(), stats.ppl_test());
  return 0;
}

KESTREL_COMMAND("bench kl", "KL divergence against a reference configuration over a text",
                run_bench_kl);

}  // namespace
}  // namespace kestrel::cli
