#include "tensor/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace kestrel {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

namespace {

// Large buffers (KV pools of gigabytes) come straight from the kernel: its pages are zero and
// only become resident when first written, so sizing a pool generously costs nothing up front.
constexpr size_t kMapThreshold = size_t(2) << 20;

}  // namespace

HostBuffer::HostBuffer(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  size_t bytes = (nbytes() + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  if (bytes >= kMapThreshold) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    KCHECK(p != MAP_FAILED, "out of memory mapping {} bytes", bytes);
    data_ = std::unique_ptr<void, Free>(p, Free{bytes});
    return;
  }
  void* p = std::aligned_alloc(64, bytes);
  KCHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
  std::memset(p, 0, bytes);
  data_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

}  // namespace kestrel
