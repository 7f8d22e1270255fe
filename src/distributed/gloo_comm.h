// distributed/gloo_comm.h — DeviceComm over Gloo's TCP transport (Debian's libgloo-dev): the ranks
// of a group that spans hosts (or network namespaces) connect a full mesh of TCP pairs, each rank
// listening on the address it is given (never a resolved hostname), after exchanging their
// pair addresses through the rendezvous store (distributed/store.h). Collectives are Gloo's ring
// algorithms: every rank ends with the same bits, in an order fixed by the group and message
// size. A peer that dies or stalls fails the collective after the timeout (Gloo's I/O errors
// become Status errors). One thread of its rank uses a GlooComm.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/device_comm.h"
#include "distributed/store.h"

namespace gloo {
class Context;
}

namespace kestrel {

struct GlooCommOptions {
  int rank = 0;
  int size = 1;
  std::string bind_address = "127.0.0.1";  // this rank's TCP address for its pairs
  std::string prefix = "gloo";             // keys in the store: one group per prefix
  std::chrono::milliseconds timeout{30000};
  std::string label = "tensor-parallel";  // what the group is, in errors
};

class GlooComm final : public DeviceComm {
 public:
  // Connects the full mesh through `store` (which must outlive the call only).
  static Expected<std::unique_ptr<GlooComm>> connect(const GlooCommOptions& options,
                                                     StoreClient& store);
  ~GlooComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(float* data, size_t n) override;
  Status reduce_scatter_sum(const float* in, size_t n, float* out) override;
  Status all_gather(const float* in, size_t n, float* out) override;
  Status all_gather_bytes(const void* in, size_t bytes, void* out) override;
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes) override;
  Status barrier() override;

 private:
  GlooComm(int rank, int size, std::string label, std::shared_ptr<gloo::Context> ctx);
  // Runs a Gloo collective; its exceptions become errors naming the group and rank.
  template <typename Fn>
  Status guarded(const char* what, Fn&& fn);

  int rank_, size_;
  std::string label_;
  std::shared_ptr<gloo::Context> ctx_;
  std::vector<float> scratch_;  // reduce-scatter's whole sum
};

}  // namespace kestrel
