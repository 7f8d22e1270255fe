// tensor/tensor.h — a non-owning view of an n-d array (shape outermost first, PyTorch order),
// plus an owning host buffer for activations and converted weights.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kestrel {

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    KCHECK(d.size() <= kMaxDims, "too many dims");
    for (int64_t v : d) dims[ndim++] = v;
  }
  static Shape from(const std::vector<int64_t>& d) {
    Shape s;
    KCHECK(d.size() <= kMaxDims, "too many dims");
    for (int64_t v : d) s.dims[s.ndim++] = v;
    return s;
  }
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const;
};

// kInt4Panels: an I8 weight whose codes all fit int4 (msModelSlim's W4A8), packed at half the
// bytes of its int8 panels (backend/cpu/int8_matmul.h).
enum class PackedKind : uint8_t { kNone, kPanels, kBf16Tiles, kInt4Panels };

struct Tensor {
  const void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  // Optional second copy of the same values in a layout the backend's kernels prefer (see
  // backend/cpu/packed_matmul.h), owned by the backend that made it; kernels that cannot read it
  // use `data`.
  const void* packed = nullptr;
  // Which layout `packed` is in, for dtypes with more than one (BF16: float panels, or AMX bf16
  // tiles read with bf16 activations).
  PackedKind packed_kind = PackedKind::kNone;
  // Block scales of an F8_E4M3 weight (DeepSeek-V3's `weight_scale_inv`, set by the loader):
  // value[r][c] = fp8[r][c] · block_scale[(r / scale_block_rows) · ceil(cols / scale_block_cols)
  // + c / scale_block_cols]. nullptr: every scale is 1.
  const float* block_scale = nullptr;
  int64_t scale_block_rows = 0, scale_block_cols = 0;
  // I8 weights (msModelSlim W8A8 and W8A8_DYNAMIC, backend/cpu/int8_matmul.h): block_scale has
  // one scale per row (scale_block_rows 1, scale_block_cols the row). act_scale 0: activations
  // are quantized per token, symmetric; otherwise per tensor, code = round(x / act_scale +
  // act_offset), and row_bias (one int32 per row, or null) is added to the integer sums.
  float act_scale = 0.0f, act_offset = 0.0f;
  const int32_t* row_bias = nullptr;
  // A float bias added to every output row by Backend::linear (one per row of this tensor, or
  // null): a checkpoint's `<linear>.bias`, where the layer does not fold it elsewhere.
  const float* out_bias = nullptr;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }
  // For a matrix [rows, cols] (or higher rank: rows = product of outer dims).
  int64_t cols() const { return shape.ndim == 0 ? 1 : shape[shape.ndim - 1]; }
  int64_t rows() const { return shape.ndim == 0 ? 1 : numel() / cols(); }
  size_t row_bytes() const { return dtype_bytes(dtype, cols()); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes();
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
  bool defined() const { return data != nullptr; }
};

// Owning, 64-byte aligned host storage; view() gives a Tensor over it.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(DType dtype, Shape shape);
  Tensor view() const { return Tensor{data_.get(), dtype_, shape_}; }
  void* data() { return data_.get(); }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_.get());
  }
  size_t nbytes() const { return dtype_bytes(dtype_, shape_.numel()); }

 private:
  struct Free {
    Free() : mapped_bytes(0) {}
    explicit Free(size_t mapped) : mapped_bytes(mapped) {}
    size_t mapped_bytes;  // nonzero: the buffer is an anonymous mapping of this size
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  DType dtype_ = DType::F32;
  Shape shape_;
};

}  // namespace kestrel
