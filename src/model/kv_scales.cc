#include "model/kv_scales.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "base/logging.h"
#include "tensor/fp8.h"
#include "tensor/quant_formats.h"

namespace kestrel {
namespace {

constexpr const char* kScaleSuffixes[] = {"k_scale",
                                          "v_scale",
                                          "kv_scale",
                                          "k_proj.output_scale",
                                          "v_proj.output_scale",
                                          "k_proj.kv_cache_scale",
                                          "k_proj.kv_cache_offset",
                                          "v_proj.kv_cache_scale",
                                          "v_proj.kv_cache_offset"};

// A small tensor stored as [n], [n, 1], [n, 1, 1] or (n = 1) a scalar, for the first n of `numels`
// that fits, as f32 (U8 as its byte values). Empty when absent.
Expected<std::vector<float>> read_small(WeightSource& src, const std::string& name,
                                        std::initializer_list<int64_t> numels) {
  if (!src.has(name)) return std::vector<float>();
  std::string tried;
  for (int64_t n : numels) {
    std::vector<Shape> shapes = {Shape{n}, Shape{n, 1}, Shape{n, 1, 1}};
    if (n == 1) shapes.push_back(Shape{});
    for (const Shape& s : shapes) {
      Expected<Tensor> t = src.get(name, s);
      if (!t.ok()) continue;
      std::vector<float> out(static_cast<size_t>(n));
      if (t->dtype == DType::U8) {
        const auto* b = static_cast<const uint8_t*>(t->data);
        for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(b[i]);
      } else {
        dequantize_row(t->dtype, t->data, out.data(), n);
      }
      return out;
    }
    tried += (tried.empty() ? "" : ", ") + std::to_string(n);
  }
  return make_error("KV cache scale '{}': expected {} values", name, tried);
}

// The first of `names` present, as read_small reads it.
Expected<std::vector<float>> read_first(WeightSource& src, const std::vector<std::string>& names,
                                        std::initializer_list<int64_t> numels,
                                        std::string* found = nullptr) {
  for (const std::string& n : names) {
    KASSIGN(std::vector<float> v, read_small(src, n, numels));
    if (v.empty()) continue;
    if (found != nullptr) *found = n;
    return v;
  }
  return std::vector<float>();
}

// Per-tensor, per-KV-head or per-channel values, as one per channel of the rank's heads.
std::vector<float> per_channel(const std::vector<float>& v, IndexRange heads, int64_t total_heads,
                               int64_t hd) {
  std::vector<float> out;
  out.reserve(size_t(heads.size() * hd));
  for (int64_t h = heads.begin; h < heads.end; ++h)
    for (int64_t d = 0; d < hd; ++d) {
      const int64_t numel = int64_t(v.size());
      out.push_back(numel == 1             ? v[0]
                    : numel == total_heads ? v[size_t(h)]
                                           : v[size_t(h * hd + d)]);
    }
  return out;
}

Status check_scales(const std::string& name, const std::vector<float>& v) {
  for (float s : v)
    if (!(s > 0.0f) || !std::isfinite(s))
      return make_error("KV cache scale '{}' holds {}: scales must be finite and positive", name,
                        s);
  return Status::Ok();
}

void warn_default_scales(DType dtype) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    KLOG_WARN(
        "--kv-cache-dtype {}: the checkpoint has no KV cache scales; using 1.0 (values past the "
        "format's range saturate; --calculate-kv-scales sets them from the first batch)",
        dtype_name(dtype));
}

float fp8_max(DType t) {
  return t == DType::F8_E5M2 ? kFp8E5M2Max : kFp8E4M3Max;
}

}  // namespace

bool is_kv_scale_tensor(const std::string& name) {
  return std::any_of(std::begin(kScaleSuffixes), std::end(kScaleSuffixes),
                     [&](const char* s) { return name.ends_with(s); });
}

Expected<KvLayerScales> KvLayerScales::load(WeightSource& src, const KvCacheQuant& q,
                                            const std::string& p, IndexRange kv_heads,
                                            int64_t total_kv_heads, int64_t hd) {
  KvLayerScales s;
  const int64_t channels = total_kv_heads * hd;
  auto expand = [&](const std::vector<float>& v) {
    return per_channel(v, kv_heads, total_kv_heads, hd);
  };
  if (q.dtype == DType::F8_E4M3 || q.dtype == DType::F8_E5M2) {
    std::string k_name, v_name;
    KASSIGN(std::vector<float> k,
            read_first(src, {p + "k_scale", p + "kv_scale", p + "k_proj.output_scale"},
                       {1, total_kv_heads}, &k_name));
    KASSIGN(std::vector<float> v,
            read_first(src, {p + "v_scale", p + "kv_scale", p + "v_proj.output_scale"},
                       {1, total_kv_heads}, &v_name));
    KTRY(check_scales(k_name, k));
    KTRY(check_scales(v_name, v));
    if (!k.empty()) s.k_scale_ = expand(k);
    if (!v.empty()) s.v_scale_ = expand(v);
    if (k.empty() || v.empty()) {
      if (q.calculate_scales) {
        s.pending_ = true;
        s.format_max_ = fp8_max(q.dtype);
      } else {
        warn_default_scales(q.dtype);
      }
    }
    return s;
  }
  if (q.dtype == DType::I8) {
    const std::string ks = p + "k_proj.kv_cache_scale", vs = p + "v_proj.kv_cache_scale";
    KASSIGN(std::vector<float> k, read_small(src, ks, {channels, 1}));
    KASSIGN(std::vector<float> v, read_small(src, vs, {channels, 1}));
    if (k.empty() || v.empty())
      return make_error("C8 KV cache: the checkpoint has no '{}'", k.empty() ? ks : vs);
    KTRY(check_scales(ks, k));
    KTRY(check_scales(vs, v));
    KASSIGN(std::vector<float> ko, read_small(src, p + "k_proj.kv_cache_offset", {channels, 1}));
    KASSIGN(std::vector<float> vo, read_small(src, p + "v_proj.kv_cache_offset", {channels, 1}));
    s.k_scale_ = expand(k);
    s.v_scale_ = expand(v);
    if (!ko.empty()) s.k_offset_ = expand(ko);
    if (!vo.empty()) s.v_offset_ = expand(vo);
    return s;
  }
  if (q.dtype == DType::MXFP8 && q.static_v_scales) {
    const std::string vs = p + "v_proj.kv_cache_scale", vo = p + "v_proj.kv_cache_offset";
    KASSIGN(std::vector<float> e, read_small(src, vs, {channels, 1}));
    KASSIGN(std::vector<float> off, read_small(src, vo, {channels, 1}));
    if (std::any_of(off.begin(), off.end(), [](float o) { return o != 0.0f; }))
      return make_error("MXFP8 KV cache: '{}' is not zero (V offsets are not supported)", vo);
    for (float& x : e) {
      if (x < 0.0f || x > 254.0f || x != std::floor(x))
        return make_error("MXFP8 KV cache: '{}' holds {}, not an E8M0 exponent (0..254)", vs, x);
      x = e8m0_to_f32(x == 0.0f ? uint8_t(127) : uint8_t(x));
    }
    if (!e.empty()) s.v_scale_ = expand(e);
  }
  return s;
}

Expected<KvLayerScales> KvLayerScales::load_latent(WeightSource& src, const KvCacheQuant& q,
                                                   const std::string& p) {
  KvLayerScales s;
  if (q.dtype != DType::F8_E4M3 && q.dtype != DType::F8_E5M2) return s;
  std::string name;
  KASSIGN(std::vector<float> k, read_first(src, {p + "k_scale", p + "kv_scale"}, {1}, &name));
  KTRY(check_scales(name, k));
  if (!k.empty()) {
    s.latent_scale_ = k[0];
  } else if (q.calculate_scales) {
    s.pending_ = true;
    s.format_max_ = fp8_max(q.dtype);
  } else {
    warn_default_scales(q.dtype);
  }
  return s;
}

void KvLayerScales::apply(KVLayer& c) const {
  auto ptr = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  c.k_scale = ptr(k_scale_);
  c.k_offset = ptr(k_offset_);
  c.v_scale = ptr(v_scale_);
  c.v_offset = ptr(v_offset_);
}

void KvLayerScales::apply(MlaCacheLayer& c) const {
  c.scale = latent_scale_;
}

// The first batch's largest value maps below the format's max, leaving later tokens room
// (vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT: 200 and 100 of E4M3's 448).
float KvLayerScales::calibrated(float amax, float share_of_e4m3) const {
  return amax > 0.0f ? amax / (format_max_ * share_of_e4m3 / kFp8E4M3Max) : 1.0f;
}

void KvLayerScales::calibrate(Backend& be, const float* k, const float* v, int64_t rows,
                              int64_t width) {
  if (!pending_ || rows == 0) return;
  pending_ = false;
  if (k_scale_.empty())
    k_scale_.assign(size_t(width), calibrated(be.max_abs(k, rows * width), 200));
  if (v_scale_.empty())
    v_scale_.assign(size_t(width), calibrated(be.max_abs(v, rows * width), 100));
}

void KvLayerScales::calibrate_latent(Backend& be, const float* latent, int64_t n_latent,
                                     const float* rope, int64_t n_rope) {
  if (!pending_ || n_latent == 0) return;
  pending_ = false;
  latent_scale_ = calibrated(std::max(be.max_abs(latent, n_latent), be.max_abs(rope, n_rope)), 200);
}

}  // namespace kestrel
