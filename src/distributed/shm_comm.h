// distributed/shm_comm.h — DeviceComm for ranks that share a host: one POSIX shared-memory segment
// with a slot per rank. A collective copies each rank's data into its slot in chunks of the slot's
// size, meets the other ranks at a counter barrier, and every rank then reads the slots in rank
// order (so a sum is the same bits everywhere); a second barrier frees the slots for the next
// chunk. A personalised exchange (all-to-all) splits each slot into one piece per destination.
// Waiting spins briefly, then yields, then naps (a peer busy with a long step gets the core), and
// gives up after the group's timeout naming the rank that did not arrive (a dead peer fails the
// collective instead of hanging it).
//
// The segment is created by rank 0 (which removes its name once every rank has attached) and
// opened by the others; all must use the same name, size and slot size. Owned by one thread of
// its rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "distributed/device_comm.h"

namespace kestrel {

struct ShmCommOptions {
  std::string name;  // the segment's name, e.g. "/kestrel-<group id>"
  int rank = 0;
  int size = 1;
  size_t slot_bytes = size_t(4) << 20;       // per rank and chunk
  std::chrono::milliseconds timeout{30000};  // for attaching and for every wait
  // Set by another thread (or process, through shared memory) when the group has failed (a rank
  // died): waits give up at once.
  const std::atomic<bool>* abort = nullptr;
  std::string label = "tensor-parallel";  // what the group is, in errors
};

class ShmComm final : public DeviceComm {
 public:
  // Creates (rank 0) or opens (the others, waiting up to the timeout for it to exist) the
  // segment and waits until every rank has attached.
  static Expected<std::unique_ptr<ShmComm>> connect(const ShmCommOptions& options);
  ~ShmComm() override;
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(float* data, size_t n) override;
  Status reduce_scatter_sum(const float* in, size_t n, float* out) override;
  Status all_gather(const float* in, size_t n, float* out) override;
  Status all_gather_bytes(const void* in, size_t bytes, void* out) override;
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes) override;
  Status barrier() override;

  struct Header;  // the segment's first cache line (shm_comm.cc)

 private:
  ShmComm(const ShmCommOptions& o, void* base, size_t bytes);
  // Marks this rank's arrival at the next barrier, posting `note` with it, and waits for every
  // rank to reach it.
  Status arrive_and_wait(uint64_t note = 0);
  // The largest note posted at the barrier just passed.
  uint64_t max_note() const;
  float* slot(int r) const;
  char* slot_bytes_of(int r) const;

  int rank_, size_;
  size_t slot_floats_;
  std::chrono::milliseconds timeout_;
  const std::atomic<bool>* abort_;
  std::string label_;
  void* base_;
  size_t bytes_;
  Header* header_;
  uint64_t epoch_ = 0;  // barriers this rank has passed
};

}  // namespace kestrel
