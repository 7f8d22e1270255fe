#include "backend/cpu/float_panels.h"

#include <cstring>

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
  auto out = std::make_unique<uint8_t[]>(total);
  std::memset(out.get(), 0, total);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* src = w.row(r);
    uint8_t* dst = out.get() + size_t(r / kPanelRows) * panel_bytes + size_t(r % kPanelRows) * es;
    for (int64_t i = 0; i < k; ++i)
      std::memcpy(dst + size_t(i) * kPanelRows * es, src + size_t(i) * es, es);
  }
  return out;
}

}  // namespace kestrel::cpu
