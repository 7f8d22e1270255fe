#include "distributed/shared_flag.h"

#include <sys/mman.h>

#include <new>
#include <utility>

#include "base/status.h"

namespace kestrel {

static_assert(std::atomic<bool>::is_always_lock_free, "a shared flag must be lock-free");

SharedFlag::SharedFlag() {
  void* page = mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  KCHECK(page != MAP_FAILED, "cannot map a shared page for a group's abort flag");
  flag_ = new (page) std::atomic<bool>(false);
}

SharedFlag::~SharedFlag() {
  if (flag_ != nullptr) munmap(flag_, sizeof(std::atomic<bool>));
}

SharedFlag::SharedFlag(SharedFlag&& other) noexcept : flag_(std::exchange(other.flag_, nullptr)) {}

SharedFlag& SharedFlag::operator=(SharedFlag&& other) noexcept {
  if (this != &other) {
    if (flag_ != nullptr) munmap(flag_, sizeof(std::atomic<bool>));
    flag_ = std::exchange(other.flag_, nullptr);
  }
  return *this;
}

}  // namespace kestrel
