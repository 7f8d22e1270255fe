// KV transfer throughput for prefill/decode disaggregation (issue 21): a consumer rank's
// KvPuller reading a request's blocks from producer ranks' KvServers over loopback TCP, and the
// same over UCX's one-sided reads (when built with UCX), beside a memcpy of the same bytes
// between the same two pools (the floor on one host: the transfer must at least copy every byte
// once; TCP adds the kernel's copies in and out of the socket).
// The pools are shaped like a Llama-3-8B rank: 32 layers of K and V (64 planes), 8 KV heads of
// 128 dims in bf16, 16-token blocks — 2 MiB a block. Requests of 1, 8 and 64 blocks (16 to 1,024
// prompt tokens), from one producer rank holding every head, and from two producer ranks holding
// four heads each (a TP-2 prefill feeding a TP-1 decode: strided half-block reads from each).
//   kv_transfer_bench [iters=20] [puller_threads=2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "kvx/kv_puller.h"
#include "kvx/kv_server.h"
#include "kvx/ucx_transport.h"

namespace {

using kestrel::KVMemoryView;
using kestrel::KvPuller;
using kestrel::KvPullJob;
using kestrel::KvPullResult;
using kestrel::KvRankInfo;
using kestrel::KvServer;

constexpr int kPlanes = 64;
constexpr int kHeads = 8;
constexpr size_t kHeadBytes = 16 * 128 * 2;
constexpr int64_t kBlocks = 160;
const char* kCompat = "llama layers=32 kv_heads=8 head_dim=128 kv_dtype=bf16 block_size=16";

struct Pool {
  std::vector<uint8_t> bytes;
  KVMemoryView view;
  Pool(int heads, uint8_t fill) {
    bytes.assign(size_t(kPlanes) * kBlocks * heads * kHeadBytes, fill);
    view.base = bytes.data();
    view.num_blocks = kBlocks;
    view.planes = kPlanes;
    view.heads = heads;
    view.block_bytes = size_t(heads) * kHeadBytes;
  }
};

KvRankInfo info(const KVMemoryView& m, int rank, int size, int h0, int h1) {
  return kestrel::describe_kv_rank(m, "bench-p", 1, kCompat, rank, size, h0, h1, kHeads, false);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The blocks of a request: scattered over the pool as a busy cache leaves them.
std::vector<int64_t> blocks_of(int64_t n, int64_t stride) {
  std::vector<int64_t> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[size_t(i)] = 1 + (i * stride) % (kBlocks - 1);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  Pool whole(kHeads, 1), half0(kHeads / 2, 2), half1(kHeads / 2, 3), consumer(kHeads, 0);

  // UCX's producer sides (registered pools), when this build has UCX.
  std::vector<std::unique_ptr<kestrel::UcxProducer>> ucx;
  if (kestrel::ucx_available())
    for (Pool* pool : {&whole, &half0, &half1}) {
      auto u = kestrel::UcxProducer::start(pool->view);
      if (!u.ok()) {
        std::fprintf(stderr, "UCX: %s\n", u.error().message.c_str());
        return 1;
      }
      ucx.push_back(std::move(*u));
    }
  auto advert = [&](size_t i) { return ucx.empty() ? nlohmann::json() : ucx[i]->advertisement(); };
  // Producer ranks on consecutive ports (the instance's port block): TCP only, then with UCX.
  std::vector<std::unique_ptr<KvServer>> one, two, one_ucx, two_ucx;
  for (int attempt = 0; attempt < 50 && two_ucx.size() < 2; ++attempt) {
    one.clear();
    two.clear();
    one_ucx.clear();
    two_ucx.clear();
    auto probe = kestrel::TcpListener::listen("127.0.0.1", 0);
    if (!probe.ok()) continue;
    const int base = probe->port();
    probe->close();
    auto a = KvServer::start("127.0.0.1", base, whole.view, info(whole.view, 0, 1, 0, kHeads));
    auto b = KvServer::start("127.0.0.1", base + 10, half0.view, info(half0.view, 0, 2, 0, 4));
    auto c = KvServer::start("127.0.0.1", base + 11, half1.view, info(half1.view, 1, 2, 4, 8));
    auto ua = KvServer::start("127.0.0.1", base + 20, whole.view, info(whole.view, 0, 1, 0, kHeads),
                              nullptr, advert(0));
    auto ub = KvServer::start("127.0.0.1", base + 30, half0.view, info(half0.view, 0, 2, 0, 4),
                              nullptr, advert(1));
    auto uc = KvServer::start("127.0.0.1", base + 31, half1.view, info(half1.view, 1, 2, 4, 8),
                              nullptr, advert(2));
    if (!a.ok() || !b.ok() || !c.ok() || !ua.ok() || !ub.ok() || !uc.ok()) continue;
    one.push_back(std::move(*a));
    two.push_back(std::move(*b));
    two.push_back(std::move(*c));
    one_ucx.push_back(std::move(*ua));
    two_ucx.push_back(std::move(*ub));
    two_ucx.push_back(std::move(*uc));
  }
  if (two_ucx.size() < 2) {
    std::fprintf(stderr, "no free ports\n");
    return 1;
  }
  KvPuller puller(consumer.view, info(consumer.view, 0, 1, 0, kHeads), threads);
  std::unique_ptr<KvPuller> ucx_puller;
  if (!ucx.empty()) {
    auto c = kestrel::UcxConsumer::start();
    if (!c.ok()) {
      std::fprintf(stderr, "UCX: %s\n", c.error().message.c_str());
      return 1;
    }
    ucx_puller = std::make_unique<KvPuller>(consumer.view, info(consumer.view, 0, 1, 0, kHeads),
                                            threads, std::move(*c));
  }

  std::printf(
      "KV transfer over loopback TCP%s, %d puller threads; %d planes x %d heads x %zu B "
      "= %.1f MiB a block; median of %d\n",
      ucx.empty() ? " (no UCX in this build)" : " and UCX", threads, kPlanes, kHeads, kHeadBytes,
      double(kPlanes * kHeads * kHeadBytes) / double(1 << 20), iters);
  std::printf("%-8s %-12s %-5s %12s %12s %12s %12s\n", "blocks", "producer", "path", "MiB",
              "pull ms", "pull GB/s", "memcpy GB/s");
  for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{64}}) {
    const std::vector<int64_t> remote = blocks_of(n, 7), local = blocks_of(n, 11);
    const double bytes = double(n) * kPlanes * kHeads * kHeadBytes;
    // The floor: the same bytes copied block by block, plane by plane, once.
    std::vector<double> copy_s;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int p = 0; p < kPlanes; ++p)
        for (size_t k = 0; k < remote.size(); ++k)
          std::memcpy(consumer.view.at(p, local[k]), whole.view.at(p, remote[k]),
                      whole.view.block_bytes);
      copy_s.push_back(seconds_since(t0));
    }
    for (int run = 0; run < (ucx_puller ? 4 : 2); ++run) {
      const int producers = 1 + run % 2;
      const bool over_ucx = run >= 2;
      const auto& servers =
          over_ucx ? (producers == 1 ? one_ucx : two_ucx) : (producers == 1 ? one : two);
      const int port = servers[0]->port();
      KvPuller& pulling = over_ucx ? *ucx_puller : puller;
      std::vector<double> pull_s;
      for (int i = 0; i < iters + 2; ++i) {
        KvPullJob job;
        job.id = uint64_t(i);
        job.host = "127.0.0.1";
        job.port = port;
        job.tp_size = producers;
        job.remote_blocks = remote;
        job.local_blocks = local;
        job.deadline = kestrel::deadline_in(std::chrono::seconds(60));
        const auto t0 = std::chrono::steady_clock::now();
        pulling.submit(job);
        std::vector<KvPullResult> done;
        while ((done = pulling.take_finished()).empty()) std::this_thread::yield();
        const double s = seconds_since(t0);
        if (!done[0].ok) {
          std::fprintf(stderr, "pull failed: %s\n", done[0].error.c_str());
          return 1;
        }
        if (over_ucx && done[0].ucx_bytes != done[0].bytes) {
          std::fprintf(stderr, "a UCX pull fell back to TCP\n");
          return 1;
        }
        if (i >= 2) pull_s.push_back(s);  // the first pulls also connect and shake hands
      }
      const double pull = median(pull_s), copy = median(copy_s);
      std::printf("%-8lld %-12s %-5s %12.1f %12.3f %12.2f %12.2f\n", static_cast<long long>(n),
                  producers == 1 ? "TP1" : "TP2 (halves)", over_ucx ? "UCX" : "TCP",
                  bytes / double(1 << 20), pull * 1e3, bytes / pull / 1e9, bytes / copy / 1e9);
    }
  }
  return 0;
}
