#include "dist/gloo_comm.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <stdexcept>

namespace kestrel {

namespace {

// Gloo's view of the rendezvous store: its keys under the group's prefix. Gloo expects
// exceptions from a store, so errors are thrown (and caught again in connect()).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(StoreClient& client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = client_.set(prefix_ + "/" + key, data);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = client_.get(prefix_ + "/" + key);
    if (!v.ok()) throw std::runtime_error(v.error().message);
    return std::move(*v);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, client_.timeout()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + "/" + k);
    const Status s = client_.wait(full, timeout);
    if (!s.ok()) throw std::runtime_error(s.message());
  }

 private:
  StoreClient& client_;
  std::string prefix_;
};

template <typename Fn>
Status guarded(const char* what, int rank, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return make_error("rank {}: Gloo {} failed: {} (a peer died, hangs or is unreachable)", rank,
                      what, e.what());
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<GlooComm>> GlooComm::connect(const GlooCommOptions& o,
                                                      StoreClient& store) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return make_error("Gloo group: rank {} of {} is not a rank of the group", o.rank, o.size);
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  KTRY(guarded("connect", o.rank, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.bind_address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    ctx->setTimeout(o.timeout);
    StoreAdapter adapter(store, o.prefix);
    ctx->connectFullMesh(adapter, device);
  }));
  return std::unique_ptr<GlooComm>(new GlooComm(o.rank, o.size, std::move(ctx)));
}

GlooComm::GlooComm(int rank, int size, std::shared_ptr<gloo::Context> ctx)
    : rank_(rank), size_(size), ctx_(std::move(ctx)) {}

GlooComm::~GlooComm() = default;

Status GlooComm::all_reduce_sum(float* data, size_t n) {
  if (n == 0 || size_ == 1) return Status::Ok();
  return guarded("all-reduce", rank_, [&] {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(data, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  });
}

Status GlooComm::all_gather(const float* in, size_t n, float* out) {
  if (size_ == 1) {
    std::copy(in, in + n, out);
    return Status::Ok();
  }
  return guarded("all-gather", rank_, [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(const_cast<float*>(in), n);
    opts.setOutput(out, n * size_t(size_));
    gloo::allgather(opts);
  });
}

Status GlooComm::barrier() {
  return guarded("barrier", rank_, [&] {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
  });
}

}  // namespace kestrel
