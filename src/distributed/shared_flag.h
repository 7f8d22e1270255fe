// distributed/shared_flag.h — a flag in a page shared with every process forked after it was made:
// one process of a group (a server and its tensor-parallel workers) sets it when the group has
// failed, and the collectives waiting in any of them give up at once (distributed/shm_comm.h's
// abort). Lock-free atomics work across processes on one mapping. Movable, owned by the process
// that made it; the children inherit the mapping.
#pragma once

#include <atomic>

namespace kestrel {

class SharedFlag {
 public:
  SharedFlag();  // cleared
  ~SharedFlag();
  SharedFlag(SharedFlag&& other) noexcept;
  SharedFlag& operator=(SharedFlag&& other) noexcept;
  SharedFlag(const SharedFlag&) = delete;
  SharedFlag& operator=(const SharedFlag&) = delete;

  std::atomic<bool>& get() const { return *flag_; }
  void set() const { flag_->store(true); }
  bool is_set() const { return flag_->load(); }

 private:
  std::atomic<bool>* flag_ = nullptr;
};

}  // namespace kestrel
