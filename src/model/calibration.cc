#include "model/calibration.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "backend/backend.h"
#include "model/batch_builder.h"
#include "model/loader.h"

namespace kestrel {
namespace {

constexpr int kBlockSize = 16;

// The CPU backend's ops, with the inputs of the watched weights' linears recorded on the way.
class RangeRecorder final : public Backend {
 public:
  explicit RangeRecorder(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Records the inputs of linears whose weight data is `data`.
  void watch(const void* data, ActivationRange* range) { watched_[data] = range; }

  std::string name() const override { return inner_->name(); }
  Workspace& workspace() override { return inner_->workspace(); }
  void prepare_weight(LinearWeight& w, DType act, const std::string& name) override {
    inner_->prepare_weight(w, act, name);
  }
  void linear(const LinearWeight& w, const float* x, int64_t m, float* y) override {
    record(w, x, m);
    inner_->linear(w, x, m, y);
  }
  void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m) override {
    for (const LinearJob& j : jobs) record(*j.w, x, m);
    inner_->linear_group(jobs, x, m);
  }
  void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* y,
                DType act) override {
    inner_->rms_norm(x, w, eps, rows, dim, y, act);
  }
  void add_rms_norm(float* x, const float* y, const float* w, float eps, int64_t rows, int64_t dim,
                    float* out, DType act) override {
    inner_->add_rms_norm(x, y, w, eps, rows, dim, out, act);
  }
  void silu_mul(const float* gate, const float* up, float* out, int64_t n, DType act) override {
    inner_->silu_mul(gate, up, out, n, act);
  }
  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                     DType act) override {
    inner_->gelu_tanh_mul(gate, up, out, n, act);
  }
  void sample(std::span<const SampleGroup> groups, std::span<GroupSamples> out) override {
    inner_->sample(groups, out);
  }
  void score_tokens(const float* logits, int64_t rows, int64_t vocab, const int32_t* tokens,
                    int top_n, TokenLogprobs* out) override {
    inner_->score_tokens(logits, rows, vocab, tokens, top_n, out);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { inner_->add_inplace(y, x, n); }
  void add_bias(float* y, const float* bias, int64_t rows, int64_t n) override {
    inner_->add_bias(y, bias, rows, n);
  }
  float max_abs(const float* x, int64_t n) override { return inner_->max_abs(x, n); }
  void scale(float* x, int64_t n, float f, DType act) override { inner_->scale(x, n, f, act); }
  void softcap(float* x, int64_t n, float cap, DType act) override {
    inner_->softcap(x, n, cap, act);
  }
  void sigmoid_mul(float* x, const float* gate, int64_t rows, int64_t dim, int64_t gate_dim,
                   DType act) override {
    inner_->sigmoid_mul(x, gate, rows, dim, gate_dim, act);
  }
  void copy_rows(std::span<const RowCopy> copies) override { inner_->copy_rows(copies); }
  void round_to(DType dt, float* x, int64_t n) override { inner_->round_to(dt, x, n); }
  void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) override {
    inner_->embedding(table, ids, n, out);
  }
  void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
            const RopeParams& p) override {
    inner_->rope(x, n_tokens, n_heads, head_dim, positions, p);
  }
  void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch,
                const RopeParams* rope_k) override {
    inner_->write_kv(cache, k, v, batch, rope_k);
  }
  void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                       int num_heads, float scale, float* out, DType act) override {
    inner_->paged_attention(q, cache, batch, num_heads, scale, out, act);
  }
  void moe_route(const float* logits, int64_t T, const MoeRouting& routing, int32_t* ids,
                 float* weights) override {
    inner_->moe_route(logits, T, routing, ids, weights);
  }
  void moe_permute(const float* x, int64_t T, int64_t H, const int32_t* ids, int k, int E,
                   MoePermutation& perm, float* permuted) override {
    inner_->moe_permute(x, T, H, ids, k, E, perm, permuted);
  }
  void moe_combine(const float* expert_out, const MoePermutation& perm, const float* weights,
                   int64_t T, int k, int64_t H, bool round_each, DType act, float* out) override {
    inner_->moe_combine(expert_out, perm, weights, T, k, H, round_each, act, out);
  }
  void hc_coefficients(const HyperConnection& hc, const float* x, int64_t T, int64_t hidden,
                       float* pre, float* post, float* comb) override {
    inner_->hc_coefficients(hc, x, T, hidden, pre, post, comb);
  }
  void hc_collapse(const float* x, const float* pre, int64_t T, int n, int64_t hidden, float* out,
                   DType act) override {
    inner_->hc_collapse(x, pre, T, n, hidden, out, act);
  }
  void hc_expand(float* x, const float* y, const float* post, const float* comb, int64_t T, int n,
                 int64_t hidden, DType act) override {
    inner_->hc_expand(x, y, post, comb, T, n, hidden, act);
  }
  void clamp(float* x, int64_t n, float lo, float hi) override { inner_->clamp(x, n, lo, hi); }
  void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t rows,
                  int64_t dim, float* y, DType act) override {
    inner_->layer_norm(x, w, b, eps, rows, dim, y, act);
  }
  void write_mla_cache(const MlaCacheLayer& cache, const float* latent, const float* k_rope,
                       const AttentionBatch& batch) override {
    inner_->write_mla_cache(cache, latent, k_rope, batch);
  }
  void causal_conv1d(const CausalConv1d& conv, const RecurrentBatch& batch) override {
    inner_->causal_conv1d(conv, batch);
  }
  void gated_delta_rule(const GatedDeltaRule& rule, const RecurrentBatch& batch) override {
    inner_->gated_delta_rule(rule, batch);
  }
  void gated_rms_norm(float* x, const float* z, const float* w, float eps, int64_t rows,
                      int64_t dim, DType act) override {
    inner_->gated_rms_norm(x, z, w, eps, rows, dim, act);
  }
  void mla_attention(const float* q_lat, const float* q_rope, const MlaCacheLayer& cache,
                     const AttentionBatch& batch, int num_heads, float scale, float* out,
                     DType act) override {
    inner_->mla_attention(q_lat, q_rope, cache, batch, num_heads, scale, out, act);
  }
  void write_indexer_keys(const MlaCacheLayer& cache, const float* keys,
                          const AttentionBatch& batch) override {
    inner_->write_indexer_keys(cache, keys, batch);
  }
  void indexer_top_k(const float* q, const float* w, const MlaCacheLayer& cache,
                     const AttentionBatch& batch, int num_heads, float scale, int top_k,
                     int32_t* selected) override {
    inner_->indexer_top_k(q, w, cache, batch, num_heads, scale, top_k, selected);
  }

 private:
  void record(const LinearWeight& w, const float* x, int64_t m) {
    const auto it = watched_.find(w.w.data);
    if (it == watched_.end() || m == 0) return;
    ActivationRange& r = *it->second;
    const auto [lo, hi] = std::minmax_element(x, x + m * w.cols());
    r.lo = r.rows == 0 ? *lo : std::min(r.lo, *lo);
    r.hi = r.rows == 0 ? *hi : std::max(r.hi, *hi);
    r.rows += m;
  }

  std::unique_ptr<Backend> inner_;
  std::unordered_map<const void*, ActivationRange*> watched_;
};

}  // namespace

Expected<std::map<std::string, ActivationRange>> calibrate_linear_inputs(
    const CalibrationRequest& req) {
  if (req.samples.empty()) return make_error("calibration: no samples");
  RangeRecorder recorder(make_cpu_backend(req.threads));
  LoadOptions o;
  o.model = req.model;
  o.load_format = "safetensors";
  o.dtype = "float32";
  o.kv_cache_dtype = "float32";
  o.shared_backend = &recorder;
  KASSIGN(std::unique_ptr<LoadedModel> lm, load_model(o));

  std::map<std::string, ActivationRange> ranges;
  for (const auto& [name, shape] : req.weights) {
    // The model's linears are views into the same mapped checkpoint the source hands out.
    KASSIGN(const Tensor w, lm->weights->get(name, shape));
    recorder.watch(w.data, &ranges[name]);
  }

  const int64_t longest = std::min<int64_t>(
      req.max_tokens_per_sample,
      int64_t(std::max_element(req.samples.begin(), req.samples.end(), [](auto& a, auto& b) {
                return a.size() < b.size();
              })->size()));
  const int32_t blocks = int32_t((longest + kBlockSize - 1) / kBlockSize);
  const int groups = int(lm->model->kv_cache_layout(kBlockSize).groups.size());
  KVCacheStorage kv = lm->model->make_kv_cache(int64_t(blocks) * groups + 1, kBlockSize, 1);
  // Group g's blocks follow group g - 1's, block 0 unused (as the pool keeps it).
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(groups),
                                           std::vector<int32_t>(static_cast<size_t>(blocks)));
  for (int g = 0; g < groups; ++g)
    std::iota(tables[size_t(g)].begin(), tables[size_t(g)].end(), 1 + g * blocks);
  std::vector<float> logits(size_t(lm->config.vocab_size));
  for (const std::vector<int32_t>& sample : req.samples) {
    if (sample.empty()) continue;
    const size_t n = size_t(std::min<int64_t>(int64_t(sample.size()), longest));
    for (int32_t id : std::span(sample).first(n))
      if (id < 0 || id >= lm->config.vocab_size)
        return make_error("calibration: token id {} is outside the vocabulary of {}", id,
                          lm->config.vocab_size);
    BatchBuilder bb(kBlockSize, groups);
    bb.add(std::span(sample).first(n), 0, tables, 1, 0);
    lm->model->forward(bb.batch(), kv, logits.data());
  }
  return ranges;
}

}  // namespace kestrel
