#include "distributed/gloo_comm.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
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
Status run_guarded(const std::string& label, const char* what, int rank, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return make_error("{} rank {}: Gloo {} failed: {} (a peer died, hangs or is unreachable)",
                      label, rank, what, e.what());
  }
  return Status::Ok();
}

}  // namespace

template <typename Fn>
Status GlooComm::guarded(const char* what, Fn&& fn) {
  return run_guarded(label_, what, rank_, std::forward<Fn>(fn));
}

Expected<std::unique_ptr<GlooComm>> GlooComm::connect(const GlooCommOptions& o,
                                                      StoreClient& store) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
    return make_error("Gloo group: rank {} of {} is not a rank of the group", o.rank, o.size);
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  KTRY(run_guarded(o.label, "connect", o.rank, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.bind_address;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    ctx->setTimeout(o.timeout);
    StoreAdapter adapter(store, o.prefix);
    ctx->connectFullMesh(adapter, device);
  }));
  return std::unique_ptr<GlooComm>(new GlooComm(o.rank, o.size, o.label, std::move(ctx)));
}

GlooComm::GlooComm(int rank, int size, std::string label, std::shared_ptr<gloo::Context> ctx)
    : rank_(rank), size_(size), label_(std::move(label)), ctx_(std::move(ctx)) {}

GlooComm::~GlooComm() = default;

Status GlooComm::all_reduce_sum(float* data, size_t n) {
  if (n == 0 || size_ == 1) return Status::Ok();
  return guarded("all-reduce", [&] {
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
  return guarded("all-gather", [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(const_cast<float*>(in), n);
    opts.setOutput(out, n * size_t(size_));
    gloo::allgather(opts);
  });
}

Status GlooComm::barrier() {
  return guarded("barrier", [&] {
    gloo::BarrierOptions opts(ctx_);
    gloo::barrier(opts);
  });
}

Status GlooComm::reduce_scatter_sum(const float* in, size_t n, float* out) {
  // The ring all-reduce of every block, then this rank's block: twice the bytes of a
  // reduce-scatter, with the all-reduce's fixed summation order.
  scratch_.assign(in, in + n * size_t(size_));
  KTRY(all_reduce_sum(scratch_.data(), scratch_.size()));
  std::copy_n(scratch_.data() + size_t(rank_) * n, n, out);
  return Status::Ok();
}

Status GlooComm::all_gather_bytes(const void* in, size_t bytes, void* out) {
  if (size_ == 1 || bytes == 0) {
    std::memcpy(out, in, bytes);
    return Status::Ok();
  }
  return guarded("all-gather", [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    opts.setOutput(static_cast<uint8_t*>(out), bytes * size_t(size_));
    gloo::allgather(opts);
  });
}

Status GlooComm::all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                              std::span<const size_t> recv_bytes) {
  KCHECK(send_bytes.size() == size_t(size_) && recv_bytes.size() == size_t(size_),
         "all-to-all over {} ranks with {} send and {} receive counts", size_, send_bytes.size(),
         recv_bytes.size());
  std::vector<int64_t> in(send_bytes.begin(), send_bytes.end());
  std::vector<int64_t> out(recv_bytes.begin(), recv_bytes.end());
  // Gloo wants buffers even when every part is empty.
  uint8_t none = 0;
  auto* src = static_cast<uint8_t*>(const_cast<void*>(send));
  auto* dst = static_cast<uint8_t*>(recv);
  return guarded("all-to-all", [&] {
    gloo::AlltoallvOptions opts(ctx_);
    opts.setInput(src != nullptr ? src : &none, in);
    opts.setOutput(dst != nullptr ? dst : &none, out);
    gloo::alltoallv(opts);
  });
}

}  // namespace kestrel
