#include "model/weights.h"

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

Expected<Tensor> load_linear(WeightSource& src, const std::string& prefix, int64_t rows,
                             int64_t cols, const ModelConfig& cfg, WeightStore& store,
                             IndexRange shard) {
  KASSIGN(Tensor w, src.get(prefix + ".weight", Shape{rows, cols}));
  if (shard.size() == 0) shard = IndexRange{0, rows};
  if (shard.begin < 0 || shard.end > rows)
    return make_error("{}.weight: rows [{}, {}) of a tensor of {}", prefix, shard.begin, shard.end,
                      rows);
  if (w.dtype != DType::F8_E4M3) {
    w.data = w.row(shard.begin);
    w.shape = Shape{shard.size(), cols};
    return w;
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
  if (s.dtype == DType::F32) {
    w.block_scale = s.as<float>();
  } else {
    std::vector<float>& owned = store.f32.emplace_back(size_t(sr * sc));
    dequantize_row(s.dtype, s.data, owned.data(), sr * sc);
    w.block_scale = owned.data();
  }
  w.block_scale += (shard.begin / br) * sc;
  w.data = w.row(shard.begin);
  w.shape = Shape{shard.size(), cols};
  w.scale_block_rows = br;
  w.scale_block_cols = bc;
  return w;
}

std::vector<float> dequantize_matrix(const Tensor& w) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out.data() + r * cols;
    dequantize_row(w.dtype, w.row(r), dst, cols);
    if (w.block_scale == nullptr) continue;
    const int64_t blocks_per_row = (cols + w.scale_block_cols - 1) / w.scale_block_cols;
    const float* scales = w.block_scale + (r / w.scale_block_rows) * blocks_per_row;
    for (int64_t c = 0; c < cols; ++c) dst[c] *= scales[c / w.scale_block_cols];
  }
  return out;
}

}  // namespace kestrel
