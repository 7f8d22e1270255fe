// dist_nccl/nccl_comm.h — DeviceComm over NCCL (the CUDA toolkit's), for ranks that each drive
// one GPU (issue 20). The interface's buffers are host memory, so each collective stages them
// through a grow-only device buffer on the rank's own stream; with a CUDA backend the same calls
// would take device buffers directly. The communicator is non-blocking: every wait polls the
// stream and the communicator's asynchronous error until the group's timeout, then aborts the
// communicator, so a dead or stuck peer fails the collective instead of hanging it. Rank 0's
// ncclUniqueId reaches the others through the rendezvous store (dist/store.h).
//
// A separate library (kestrel_dist_nccl), built when the CUDA toolkit's NCCL is found, so that
// nothing else links CUDA. One thread of its rank uses a NcclComm; the process must not have
// initialised CUDA before it forked.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/device_comm.h"
#include "dist/store.h"

namespace kestrel {

struct NcclCommOptions {
  int rank = 0;
  int size = 1;
  int device = 0;               // the GPU this rank drives
  std::string prefix = "nccl";  // the group's keys in the store
  std::chrono::milliseconds timeout{60000};
  std::string label = "tensor-parallel";  // what the group is, in errors
};

class NcclComm final : public DeviceComm {
 public:
  static Expected<std::unique_ptr<NcclComm>> connect(const NcclCommOptions& options,
                                                     StoreClient& store);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(float* data, size_t n) override;
  Status reduce_scatter_sum(const float* in, size_t n, float* out) override;
  Status all_gather(const float* in, size_t n, float* out) override;
  Status all_gather_bytes(const void* in, size_t bytes, void* out) override;
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes) override;
  Status barrier() override;

  struct State;  // the CUDA and NCCL handles (nccl_comm.cc)

 private:
  NcclComm(const NcclCommOptions& options, std::unique_ptr<State> state);
  int rank_, size_;
  std::unique_ptr<State> state_;
};

// GPUs this process can see (0 without a driver or device). It initialises CUDA in the calling
// process.
int cuda_device_count();

}  // namespace kestrel
