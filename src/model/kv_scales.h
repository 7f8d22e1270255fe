// model/kv_scales.h — the scales of a quantized KV cache (--kv-cache-dtype fp8 / fp8_e4m3 /
// fp8_e5m2 / mxfp8, and msModelSlim's C8 int8 cache), read per attention layer from the
// checkpoint (specdec-quant.md §2.7, §2.8, §3.1):
//   FP8:   {attn}.k_scale, .v_scale (or one .kv_scale for both; or the older
//          .k_proj.output_scale / .v_proj.output_scale), per tensor or per KV head; absent: 1.0
//          (with one warning), or --calculate-kv-scales: max|x| / the format's max over the first
//          batch a layer sees, per tensor, then fixed.
//   C8:    {attn}.k_proj.kv_cache_scale / .kv_cache_offset and the v_proj ones, per channel
//          (total KV heads × head_dim) or per tensor; x = (q − offset) · scale. Required.
//   MXFP8: K rows carry their own scales; V's are static per channel, E8M0 bytes in
//          {attn}.v_proj.kv_cache_scale when the description says
//          K_DYNAMIC_V_STATIC_MXFP8_PER_CHANNEL (0 is read as 127, i.e. 1.0), else 1.0.
//          vLLM-Ascend's loader names the parameter v_cache_scale; that the checkpoint stores it
//          under the C8 name is our reading of the msModelSlim writer, not a documented fact.
// Scales are expanded to one per channel of the rank's KV heads. An MLA latent cache takes one
// per-tensor scale (k_scale or kv_scale). Each layer owns its KvLayerScales; only the engine
// thread's forward pass touches them (calibrate() on the first batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

// How the loader chose to quantize the KV cache.
struct KvCacheQuant {
  DType dtype = DType::F32;       // the cache's element type (F8_E4M3, F8_E5M2, I8, MXFP8, floats)
  bool calculate_scales = false;  // --calculate-kv-scales (FP8 caches only)
  bool static_v_scales = false;   // MXFP8: the checkpoint has V's E8M0 scales
};

// Whether `name` is one of the checkpoint tensors this module reads (the dummy weight source,
// which has every other tensor, has none of these).
bool is_kv_scale_tensor(const std::string& name);

class KvLayerScales {
 public:
  KvLayerScales() = default;
  // A GQA layer's: `prefix` is its attention's (…self_attn.), `kv_heads` the rank's heads of
  // `total_kv_heads`.
  static Expected<KvLayerScales> load(WeightSource& src, const KvCacheQuant& q,
                                      const std::string& prefix, IndexRange kv_heads,
                                      int64_t total_kv_heads, int64_t head_dim);
  // An MLA layer's single latent scale.
  static Expected<KvLayerScales> load_latent(WeightSource& src, const KvCacheQuant& q,
                                             const std::string& prefix);

  // Points the cache view at the scales (none: the view keeps its nulls).
  void apply(KVLayer& cache) const;
  void apply(MlaCacheLayer& cache) const;

  // --calculate-kv-scales: on the first call with tokens, sets the missing scales from this
  // batch's `rows` rows of K and V (`width` channels each, the rank's heads); later calls do
  // nothing.
  void calibrate(Backend& be, const float* k, const float* v, int64_t rows, int64_t width);
  // The same for a latent cache: its n_latent latent and n_rope rope-key values.
  void calibrate_latent(Backend& be, const float* latent, int64_t n_latent, const float* rope,
                        int64_t n_rope);
  bool pending() const { return pending_; }

 private:
  float calibrated(float amax, float share_of_e4m3) const;

  std::vector<float> k_scale_, k_offset_, v_scale_, v_offset_;
  float latent_scale_ = 1.0f;
  float format_max_ = 0.0f;  // of the FP8 format being calibrated for
  bool pending_ = false;
};

}  // namespace kestrel
