#include "backend/cpu/float_panels.h"

#include "base/status.h"

namespace kestrel::cpu {

bool float_packable(const Tensor& w) {
  const bool type_ok = w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
  return type_ok && w.shape.ndim == 2 && w.cols() > 0 && w.rows() > 0;
}

std::unique_ptr<uint8_t[]> pack_float_weight(const Tensor& w) {
  KCHECK(float_packable(w), "pack_float_weight: {} [{}] is not packable", dtype_name(w.dtype),
         w.shape.str());
  const int64_t n = w.rows(), k = w.cols();
  const size_t es = w.dtype == DType::F32 ? 4 : 2;
  const size_t panel_bytes = float_panel_bytes(w.dtype, k);
  const size_t total = size_t(packed_panels(n)) * panel_bytes;
  auto out = std::make_unique<uint8_t[]>(total);  // zeroed: the padding rows stay 0
  // Element by element with the element type known to the compiler (a memcpy of a run-time size
  // per element made this most of the load time of an F16 model).
  auto scatter = [&](auto elem) {
    using E = decltype(elem);
    for (int64_t r = 0; r < n; ++r) {
      const auto* src = reinterpret_cast<const E*>(w.row(r));
      auto* dst =
          reinterpret_cast<E*>(out.get() + size_t(r / kPanelRows) * panel_bytes) + r % kPanelRows;
      for (int64_t i = 0; i < k; ++i) dst[i * kPanelRows] = src[i];
    }
  };
  if (es == 4) {
    scatter(uint32_t{});
  } else {
    scatter(uint16_t{});
  }
  return out;
}

void transpose_activations(const float* x, int64_t m, int64_t k, float* xt) {
  for (int64_t i = 0; i < k; ++i)
    for (int64_t r = 0; r < m; ++r) xt[i * m + r] = x[r * k + i];
}

}  // namespace kestrel::cpu
