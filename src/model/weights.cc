#include "model/weights.h"

#include <cstring>

#include "tensor/quant_formats.h"

namespace kestrel {

Expected<std::vector<float>> load_vector(WeightSource& src, const std::string& name, int64_t n) {
  KASSIGN(Tensor t, src.get(name, Shape{n}));
  std::vector<float> out(n);
  dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

namespace {

bool partial(const IndexRange& r, int64_t n) {
  return r.size() > 0 && (r.begin != 0 || r.end != n);
}

Expected<Tensor> take_shard(Tensor w, const std::string& name, const LinearShard& s,
                            WeightStore& store) {
  const int64_t rows = w.rows(), cols = w.cols();
  if (partial(s.rows, rows)) {
    if (s.rows.end > rows) return make_error("{}: row shard past {} rows", name, rows);
    w.data = w.row(s.rows.begin);
    w.shape = Shape{s.rows.size(), cols};
  }
  if (partial(s.cols, cols)) {
    const int64_t block = dtype_info(w.dtype).block_elems;
    if (s.cols.end > cols || s.cols.begin % block != 0 ||
        (s.cols.size() % block != 0 && s.cols.end != cols))
      return make_error("{}: columns [{}, {}) do not fall on {}-element blocks", name, s.cols.begin,
                        s.cols.end, block);
    const size_t offset = dtype_bytes(w.dtype, s.cols.begin);
    const size_t width = dtype_bytes(w.dtype, s.cols.size());
    std::vector<uint8_t>& owned = store.bytes.emplace_back(width * size_t(w.rows()));
    for (int64_t r = 0; r < w.rows(); ++r)
      std::memcpy(owned.data() + size_t(r) * width, w.row(r) + offset, width);
    w.data = owned.data();
    w.shape = Shape{w.rows(), s.cols.size()};
  }
  return w;
}

}  // namespace

Expected<Tensor> load_linear(WeightSource& src, const std::string& prefix, int64_t rows,
                             int64_t cols, const ModelConfig& cfg, WeightStore& store,
                             const LinearShard& shard) {
  KASSIGN(Tensor w, src.get(prefix + ".weight", Shape{rows, cols}));
  const bool sharded = partial(shard.rows, rows) || partial(shard.cols, cols);
  if (sharded && w.dtype == DType::F8_E4M3)
    return make_error("{}.weight: tensor parallelism over FP8 block weights is not supported yet",
                      prefix);
  if (sharded) return take_shard(w, prefix + ".weight", shard, store);
  if (w.dtype != DType::F8_E4M3) return w;
  if (!cfg.fp8.enabled)
    return make_error("{}.weight is float8_e4m3 but config.json declares no fp8 quantization",
                      prefix);
  const int64_t br = cfg.fp8.block_rows, bc = cfg.fp8.block_cols;
  const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  KASSIGN(Tensor s, src.get(prefix + ".weight_scale_inv", Shape{sr, sc}));
  if (s.dtype == DType::F32) {
    w.block_scale = s.as<float>();
  } else {
    std::vector<float>& owned = store.f32.emplace_back(size_t(sr * sc));
    dequantize_row(s.dtype, s.data, owned.data(), sr * sc);
    w.block_scale = owned.data();
  }
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
