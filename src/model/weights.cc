#include "model/weights.h"

#include <cstring>

#include "base/logging.h"
#include "model/modelslim.h"
#include "tensor/quant_formats.h"

namespace kestrel {

Expected<std::vector<float>> load_vector(WeightSource& src, const std::string& name, int64_t n) {
  KASSIGN(Tensor t, src.get(name, Shape{n}));
  std::vector<float> out(n);
  dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

Expected<std::vector<float>> load_norm(WeightSource& src, const std::string& name, int64_t n,
                                       const ModelConfig& cfg) {
  KASSIGN(std::vector<float> w, load_vector(src, name, n));
  if (cfg.norm_offset && !cfg.norm_weights_include_offset)
    for (float& v : w) v += 1.0f;
  return w;
}

Expected<Norm> load_norm_with_bias(WeightSource& src, const std::string& prefix, int64_t n,
                                   const ModelConfig& cfg) {
  Norm norm;
  KASSIGN(norm.weight, load_norm(src, prefix + ".weight", n, cfg));
  if (src.has(prefix + ".bias")) {
    KASSIGN(norm.bias, load_vector(src, prefix + ".bias", n));
  }
  return norm;
}

namespace {

// The tensor in shape `a`, or else in shape `b` (that one's error when neither fits).
Expected<Tensor> get_either(WeightSource& src, const std::string& name, const Shape& a,
                            const Shape& b) {
  if (Expected<Tensor> t = src.get(name, a); t.ok()) return t;
  return src.get(name, b);
}

// A per-row vector ([rows, 1] or [rows]) of any float dtype as f32.
Expected<const float*> row_vector(WeightSource& src, const std::string& name, int64_t rows,
                                  WeightStore& store) {
  KASSIGN(const Tensor t, get_either(src, name, Shape{rows, 1}, Shape{rows}));
  std::vector<float>& out = store.f32.emplace_back(size_t(rows));
  dequantize_row(t.dtype, t.data, out.data(), rows);
  return out.data();
}

// One value of a [1] tensor of any float dtype.
Expected<float> scalar(WeightSource& src, const std::string& name) {
  KASSIGN(const Tensor t, src.get(name, Shape{1}));
  float v = 0.0f;
  dequantize_row(t.dtype, t.data, &v, 1);
  return v;
}

// Rows `shard` of an I8 weight with one scale per row (`scale`, the whole tensor's) and its
// activation scheme `sc`.
LinearWeight int8_rows(Tensor w, WeightScales sc, const float* scale, IndexRange shard) {
  const int64_t cols = w.cols();
  w.data = w.row(shard.begin);
  w.shape = Shape{shard.size(), cols};
  sc.block = scale + shard.begin;
  sc.block_rows = 1;
  sc.block_cols = cols;
  return LinearWeight{w, sc};
}

// msModelSlim's W8A8_DYNAMIC, W4A8_DYNAMIC and W8A8 (model/modelslim.h): the int8 weight (int4
// widened), one scale per row and the activation scheme (WeightScales), rows `shard` of them.
Expected<LinearWeight> load_int8_linear(WeightSource& src, const std::string& prefix,
                                        const std::string& type, int64_t rows, int64_t cols,
                                        WeightStore& store, IndexRange shard) {
  const bool int4 = type == "W4A8_DYNAMIC";
  if (int4 && rows % 2 != 0)
    return make_error("{}.weight: W4A8_DYNAMIC packs two rows per byte; {} rows", prefix, rows);
  // Some writers store the codes as `weight_packed`, which vLLM-Ascend reads as `weight`.
  const std::string name = !src.has(prefix + ".weight") && src.has(prefix + ".weight_packed")
                               ? prefix + ".weight_packed"
                               : prefix + ".weight";
  KASSIGN(Tensor w, src.get(name, Shape{int4 ? rows / 2 : rows, cols}));
  if (w.dtype != DType::I8)
    return make_error("{}.weight: {} weights are int8, this one is {}", prefix, type,
                      dtype_name(w.dtype));
  const float* scale = nullptr;
  WeightScales sc;
  if (int4) {
    // Widened to int8 (the exact int32 kernel runs them as they are): twice the bytes of the
    // packed file, which a packed int4 kernel would save.
    std::vector<int8_t>& wide = store.i8.emplace_back(size_t(rows * cols));
    unpack_w4a8_rows(w.as<int8_t>(), rows, cols, wide.data());
    w.data = wide.data();
    w.shape = Shape{rows, cols};
  }
  if (type == "W8A8_DYNAMIC" || int4) {
    KASSIGN(scale, row_vector(src, prefix + ".weight_scale", rows, store));
    if (src.has(prefix + ".weight_offset")) {
      KASSIGN(const float* offset, row_vector(src, prefix + ".weight_offset", rows, store));
      for (int64_t r = 0; r < rows; ++r)
        if (offset[r] != 0.0f)
          return make_error("{}.weight_offset: asymmetric int8 weights are not supported", prefix);
    }
    if (int4 && src.has(prefix + ".scale_bias")) {
      // [rows, 16] for row-parallel layers (one term per TP chunk of the columns), else [rows, 1].
      KASSIGN(const Tensor sb,
              get_either(src, prefix + ".scale_bias", Shape{rows, 16}, Shape{rows, 1}));
      std::vector<float> bias(size_t(sb.numel()));
      dequantize_row(sb.dtype, sb.data, bias.data(), sb.numel());
      if (Status st =
              check_w4a8_scale_bias(w.as<int8_t>(), scale, bias.data(), rows, cols, sb.cols());
          !st.ok())
        KLOG_WARN("{}: {} (it is not used: the int32 sum needs no such term)", prefix,
                  st.message());
    }
  } else {
    KASSIGN(sc.act_scale, scalar(src, prefix + ".input_scale"));
    KASSIGN(sc.act_offset, scalar(src, prefix + ".input_offset"));
    if (!(sc.act_scale > 0.0f))
      return make_error("{}.input_scale: {} is not a positive scale", prefix, sc.act_scale);
    // deq_scale: f32, or (f16 models) int64 holding the f32 bit pattern.
    KASSIGN(const Tensor deq, src.get(prefix + ".deq_scale", Shape{rows}));
    std::vector<float>& d = store.f32.emplace_back(size_t(rows));
    if (deq.dtype == DType::I64) {
      for (int64_t r = 0; r < rows; ++r) {
        const uint32_t bits = uint32_t(deq.as<int64_t>()[r]);
        std::memcpy(&d[size_t(r)], &bits, sizeof bits);
      }
    } else {
      dequantize_row(deq.dtype, deq.data, d.data(), rows);
    }
    scale = d.data();
    KASSIGN(const Tensor bias, src.get(prefix + ".quant_bias", Shape{rows}));
    if (bias.dtype != DType::I32)
      return make_error("{}.quant_bias: int32 expected, got {}", prefix, dtype_name(bias.dtype));
    sc.row_bias = bias.as<int32_t>() + shard.begin;
  }
  return int8_rows(w, sc, scale, shard);
}

// compressed-tensors int8 (ModelConfig::compressed_tensors): weight_scale per row ([rows, 1]) or
// per tensor ([1]); static activations fold their scale into the row scales and their zero
// point into an int32 row bias: s_x · s_w · Σ (q − zp) · w = (s_x · s_w) · (Σ q · w − zp · Σ w).
Expected<LinearWeight> load_compressed_int8(WeightSource& src, const std::string& prefix, Tensor w,
                                            const ModelConfig& cfg, WeightStore& store,
                                            IndexRange shard) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float>& scale = store.f32.emplace_back(size_t(rows));
  KASSIGN(const Tensor s, get_either(src, prefix + ".weight_scale", Shape{rows, 1}, Shape{1}));
  if (s.numel() == 1) {
    float v = 0.0f;
    dequantize_row(s.dtype, s.data, &v, 1);
    std::fill(scale.begin(), scale.end(), v);
  } else {
    dequantize_row(s.dtype, s.data, scale.data(), rows);
  }
  WeightScales sc;
  if (!cfg.compressed_tensors.dynamic_activations) {
    KASSIGN(sc.act_scale, scalar(src, prefix + ".input_scale"));
    if (!(sc.act_scale > 0.0f))
      return make_error("{}.input_scale: {} is not a positive scale", prefix, sc.act_scale);
    for (float& v : scale) v *= sc.act_scale;
    if (src.has(prefix + ".input_zero_point")) {
      KASSIGN(sc.act_offset, scalar(src, prefix + ".input_zero_point"));
    }
    if (sc.act_offset != 0.0f) {
      std::vector<int32_t>& bias = store.i32.emplace_back(size_t(rows));
      const auto zp = int32_t(sc.act_offset);
      for (int64_t r = 0; r < rows; ++r) {
        int32_t sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += w.as<int8_t>()[r * cols + c];
        bias[size_t(r)] = -zp * sum;
      }
      sc.row_bias = bias.data() + shard.begin;
    }
  }
  return int8_rows(w, sc, scale.data(), shard);
}

}  // namespace

namespace {

Expected<LinearWeight> load_linear_weight(WeightSource& src, const std::string& prefix,
                                          int64_t rows, int64_t cols, const ModelConfig& cfg,
                                          WeightStore& store, IndexRange shard);

}  // namespace

// The weight, and its `.bias` when the checkpoint has one (rows `shard` of it) and the layer does
// not fold it: a static W8A8 layer's quant_bias already holds round(bias / deq_scale), so only
// the other schemes add it (msModelSlim's anti-outlier smoothing gives q/k/v and gate/up biases).
Expected<LinearWeight> load_linear(WeightSource& src, const std::string& prefix, int64_t rows,
                                   int64_t cols, const ModelConfig& cfg, WeightStore& store,
                                   IndexRange shard) {
  if (shard.size() == 0) shard = IndexRange{0, rows};
  if (shard.begin < 0 || shard.end > rows)
    return make_error("{}.weight: rows [{}, {}) of a tensor of {}", prefix, shard.begin, shard.end,
                      rows);
  KASSIGN(LinearWeight w, load_linear_weight(src, prefix, rows, cols, cfg, store, shard));
  const bool folded =
      cfg.modelslim && cfg.modelslim->scheme(cfg.modelslim->layer_type(prefix)) == "W8A8";
  if (!folded && src.has(prefix + ".bias")) {
    KASSIGN(std::vector<float> b, load_vector(src, prefix + ".bias", rows));
    w.bias = store.f32.emplace_back(b.begin() + shard.begin, b.begin() + shard.end).data();
  }
  return w;
}

namespace {

Expected<LinearWeight> load_linear_weight(WeightSource& src, const std::string& prefix,
                                          int64_t rows, int64_t cols, const ModelConfig& cfg,
                                          WeightStore& store, IndexRange shard) {
  if (cfg.modelslim) {
    const std::string type = cfg.modelslim->scheme(cfg.modelslim->layer_type(prefix));
    if (type == "W8A8" || type == "W8A8_DYNAMIC" || type == "W4A8_DYNAMIC")
      return load_int8_linear(src, prefix, type, rows, cols, store, shard);
    if (type != "FLOAT")
      return make_error("{}: msModelSlim type {} is not supported", prefix, type);
  }
  KASSIGN(Tensor w, src.get(prefix + ".weight", Shape{rows, cols}));
  if (w.dtype == DType::I8 && cfg.compressed_tensors.enabled)
    return load_compressed_int8(src, prefix, w, cfg, store, shard);
  if (w.dtype == DType::I8)
    return make_error("{}.weight is int8 but nothing describes its quantization", prefix);
  if (w.dtype != DType::F8_E4M3) {
    w.data = w.row(shard.begin);
    w.shape = Shape{shard.size(), cols};
    return LinearWeight{w};
  }
  if (!cfg.fp8.enabled)
    return make_error("{}.weight is float8_e4m3 but config.json declares no fp8 quantization",
                      prefix);
  const int64_t br = cfg.fp8.block_rows, bc = cfg.fp8.block_cols;
  const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  // A shard owns whole scale blocks: it starts on one, and ends on one or at the last row.
  if (shard.begin % br != 0 || (shard.end % br != 0 && shard.end != rows))
    return make_error("{}.weight: rows [{}, {}) do not fall on the {}-row FP8 scale blocks", prefix,
                      shard.begin, shard.end, br);
  KASSIGN(Tensor s, src.get(prefix + ".weight_scale_inv", Shape{sr, sc}));
  WeightScales scales;
  if (s.dtype == DType::F32) {
    scales.block = s.as<float>();
  } else {
    std::vector<float>& owned = store.f32.emplace_back(size_t(sr * sc));
    dequantize_row(s.dtype, s.data, owned.data(), sr * sc);
    scales.block = owned.data();
  }
  scales.block += (shard.begin / br) * sc;
  scales.block_rows = br;
  scales.block_cols = bc;
  w.data = w.row(shard.begin);
  w.shape = Shape{shard.size(), cols};
  return LinearWeight{w, scales};
}

}  // namespace

std::vector<float> dequantize_matrix(const LinearWeight& lw) {
  const Tensor& w = lw.w;
  const WeightScales& s = lw.scales;
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out.data() + r * cols;
    dequantize_row(w.dtype, w.row(r), dst, cols);
    if (s.block == nullptr) continue;
    const int64_t blocks_per_row = (cols + s.block_cols - 1) / s.block_cols;
    const float* scales = s.block + (r / s.block_rows) * blocks_per_row;
    // A static I8 weight's row scale is deq_scale = input_scale · weight scale.
    const float unfold = w.dtype == DType::I8 && s.act_scale > 0.0f ? 1.0f / s.act_scale : 1.0f;
    for (int64_t c = 0; c < cols; ++c) dst[c] *= scales[c / s.block_cols] * unfold;
  }
  return out;
}

}  // namespace kestrel
