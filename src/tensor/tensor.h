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

struct Tensor {
  const void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

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
