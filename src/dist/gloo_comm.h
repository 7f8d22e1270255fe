// dist/gloo_comm.h — DeviceComm over Gloo's TCP transport (Debian's libgloo-dev): the ranks of a
// group that spans hosts (or network namespaces) connect a full mesh of TCP pairs, each rank
// listening on the address it is given (never a resolved hostname), after exchanging their
// pair addresses through the rendezvous store (dist/store.h). Collectives are Gloo's ring
// algorithms: every rank ends with the same bits, in an order fixed by the group and message
// size. A peer that dies or stalls fails the collective after the timeout (Gloo's I/O errors
// become Status errors). One thread of its rank uses a GlooComm.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/device_comm.h"
#include "dist/store.h"

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
  Status all_gather(const float* in, size_t n, float* out) override;
  Status barrier() override;

 private:
  GlooComm(int rank, int size, std::shared_ptr<gloo::Context> ctx);
  int rank_, size_;
  std::shared_ptr<gloo::Context> ctx_;
};

}  // namespace kestrel
