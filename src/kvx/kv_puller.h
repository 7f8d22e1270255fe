// kvx/kv_puller.h — a consumer rank's pulls (issue 21): given a request's remote blocks on a
// producer instance (its host, its port block, its TP size) and the local blocks to fill, a
// transfer thread shakes hands with the producer ranks that hold this rank's KV heads (checking
// the compatibility key), reads those heads of every remote block and receives the bytes straight
// into the local blocks, then reports the job done or failed. Producer ranks are found by their
// handshake (each says which heads it holds), so any producer TP ≥ 1 works with any consumer TP
// whose heads it covers; a latent (MLA) cache is read whole from one rank. Connections are kept
// per producer rank and dropped on any error; a producer that comes back under a new
// incarnation is simply a new peer. With UCX (kvx/ucx_transport.h), a producer rank that
// advertises it is read with one-sided UCX reads instead of its TCP stream; a UCX failure drops
// back to TCP for that rank. A model with linear-attention layers also reads the request's held
// state slot into a local one, by key heads the same way.
//
// Owned by the model runner; submit() and take_finished() from its thread, the transfers on the
// puller's own threads. Until a job is reported, its local blocks are being written: the caller
// must neither compute nor free them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvx/kv_rank.h"
#include "kvx/tcp.h"
#include "kvx/ucx_transport.h"

namespace kestrel {

struct KvPullJob {
  uint64_t id = 0;   // the caller's (a request handle)
  std::string host;  // the producer instance: its ranks listen on port + tp_rank
  int port = 0;
  int tp_size = 1;
  std::vector<int64_t> remote_blocks;  // in token order
  std::vector<int64_t> local_blocks;   // as many, same order
  // Linear-attention models: the producer's state slot held for the request, and the local
  // one to fill (-1: none).
  int32_t remote_state = -1;
  int32_t local_state = -1;
  Deadline deadline;
};

struct KvPullResult {
  uint64_t id = 0;
  bool ok = false;
  std::string error;
  int64_t bytes = 0;
  int64_t ucx_bytes = 0;  // of those, read over UCX
  double seconds = 0;
};

struct KvPullerStats {
  std::atomic<int64_t> bytes_received{0};
  std::atomic<int64_t> bytes_over_ucx{0};  // of those
  std::atomic<int64_t> blocks_received{0};
  std::atomic<int64_t> jobs_failed{0};
};

class KvPuller {
 public:
  // `self` describes this rank (its compatibility key and heads); `memory` is its KV pool;
  // `ucx`, when given, reads the producer ranks that advertise UCX.
  KvPuller(KVMemoryView memory, KvRankInfo self, int threads = 2,
           std::unique_ptr<UcxConsumer> ucx = nullptr);
  ~KvPuller();
  KvPuller(const KvPuller&) = delete;
  KvPuller& operator=(const KvPuller&) = delete;

  void submit(KvPullJob job);
  // Jobs finished since the last call, in finishing order.
  std::vector<KvPullResult> take_finished();
  size_t in_flight() const;
  const KvPullerStats& stats() const { return stats_; }

 private:
  struct Peer {  // one producer rank
    TcpConn conn;
    KvRankInfo info;
    std::unique_ptr<UcxConsumer::Remote> ucx;  // when both sides have UCX
  };
  void run();
  KvPullResult pull(const KvPullJob& job);
  // A connected, handshaken producer rank (taken out of the pool; put back after use).
  Expected<std::unique_ptr<Peer>> peer(const std::string& host, int port, Deadline deadline);
  void put_back(const std::string& key, std::unique_ptr<Peer> peer);
  // Heads [h0, h1) of the job's blocks from `peer`, over UCX (then `over_ucx`) or its TCP stream.
  Status read_heads(Peer& peer, const KvPullJob& job, int h0, int h1, bool& over_ucx);
  Status read_ucx(Peer& peer, const KvPullJob& job, int h0, int h1);
  Status read_tcp(Peer& peer, const KvPullJob& job, int h0, int h1);
  // Linear-attention key heads [h0, h1) of the job's state slot, the same two ways.
  Status read_state(Peer& peer, const KvPullJob& job, int h0, int h1, bool& over_ucx);
  Status read_state_ucx(Peer& peer, const KvPullJob& job, int h0, int h1);
  Status read_state_tcp(Peer& peer, const KvPullJob& job, int h0, int h1);
  // Reads [begin, end) of a per-rank range (range_of: a producer rank's part) from the job's
  // producer ranks in order from rank `first`, each part with `read`; errors when a part is
  // missing or a read fails.
  using RangeOf = std::function<std::pair<int, int>(const KvRankInfo&)>;
  using ReadPart = std::function<Status(Peer&, int, int)>;
  Status cover(const KvPullJob& job, int begin, int end, int first, const RangeOf& range_of,
               const ReadPart& read);

  KVMemoryView memory_;
  KvRankInfo self_;
  std::unique_ptr<UcxConsumer> ucx_;  // declared before idle_: its endpoints go first
  KvPullerStats stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KvPullJob> queue_;
  std::vector<KvPullResult> finished_;
  size_t running_ = 0;
  bool stop_ = false;
  std::multimap<std::string, std::unique_ptr<Peer>> idle_;  // host:port → pooled connections
  std::vector<std::thread> threads_;
};

}  // namespace kestrel
