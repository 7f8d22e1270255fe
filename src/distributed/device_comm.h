// distributed/device_comm.h — the collectives that tensor, data and expert parallelism run between
// the ranks of a group (issue 20), behind one interface so that model code never names a library:
// a shared-memory implementation for ranks on one host (distributed/shm_comm.h), Gloo over TCP
// between hosts (distributed/gloo_comm.h) and NCCL on GPUs next to them. Every rank calls the same
// collectives in the same order; results are the same bits on every rank, added in an order fixed
// by the group and the message size (whatever the arrival order), so a TP run is reproducible step
// after step. One thread per rank calls a communicator.
#pragma once

#include <cstddef>
#include <span>

#include "base/status.h"

namespace kestrel {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = Σ over ranks of their data[i] (shared memory: added in rank order). An error (a
  // rank did not arrive in time) leaves `data` unspecified and the group unusable.
  virtual Status all_reduce_sum(float* data, size_t n) = 0;
  // out[i] = Σ over ranks r of r's in[rank()·n + i]: each rank gets its block of n of the sum
  // of every rank's size()·n values.
  virtual Status reduce_scatter_sum(const float* in, size_t n, float* out) = 0;
  // out[r·n + i] = rank r's in[i]: every rank's n values, in rank order.
  virtual Status all_gather(const float* in, size_t n, float* out) = 0;
  // The same over raw bytes (headers, counts): out[r·bytes ...] = rank r's `bytes` bytes.
  virtual Status all_gather_bytes(const void* in, size_t bytes, void* out) = 0;
  // A personalised exchange: `send` holds send_bytes[q] bytes for each rank q, one after the
  // other in rank order, and `recv` gets recv_bytes[s] bytes from each rank s the same way
  // (rank s's send_bytes[rank()] must equal this rank's recv_bytes[s]; parts may be empty).
  virtual Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                              std::span<const size_t> recv_bytes) = 0;
  virtual Status barrier() = 0;
};

}  // namespace kestrel
