#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

namespace kestrel {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

HostBuffer::HostBuffer(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  size_t bytes = (nbytes() + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  void* p = std::aligned_alloc(64, bytes);
  KCHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
  std::memset(p, 0, bytes);
  data_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const {
  std::free(p);
}

}  // namespace kestrel
