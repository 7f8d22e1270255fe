#include "kvx/kv_puller.h"

#include <algorithm>

#include "base/logging.h"

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kConnectTimeout{5};

}  // namespace

KvPuller::KvPuller(KVMemoryView memory, KvRankInfo self, int threads,
                   std::unique_ptr<UcxConsumer> ucx)
    : memory_(memory), self_(std::move(self)), ucx_(std::move(ucx)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { run(); });
}

KvPuller::~KvPuller() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void KvPuller::submit(KvPullJob job) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

std::vector<KvPullResult> KvPuller::take_finished() {
  std::lock_guard lock(mu_);
  std::vector<KvPullResult> out;
  out.swap(finished_);
  return out;
}

size_t KvPuller::in_flight() const {
  std::lock_guard lock(mu_);
  return queue_.size() + running_;
}

void KvPuller::run() {
  while (true) {
    KvPullJob job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    KvPullResult r = pull(job);
    if (!r.ok) ++stats_.jobs_failed;
    std::lock_guard lock(mu_);
    --running_;
    finished_.push_back(std::move(r));
  }
}

Expected<std::unique_ptr<KvPuller::Peer>> KvPuller::peer(const std::string& host, int port,
                                                         Deadline deadline) {
  const std::string key = host + ":" + std::to_string(port);
  {
    std::lock_guard lock(mu_);
    if (auto it = idle_.find(key); it != idle_.end()) {
      std::unique_ptr<Peer> p = std::move(it->second);
      idle_.erase(it);
      return p;
    }
  }
  auto p = std::make_unique<Peer>();
  KASSIGN(p->conn, TcpConn::connect(host, port, std::min(deadline, deadline_in(kConnectTimeout))));
  KTRY(p->conn.send_message({{"op", "hello"}, {"compat", self_.compat}}, deadline));
  KASSIGN(const nlohmann::json reply, p->conn.recv_message(deadline));
  if (reply.value("op", "") != "hello")
    return make_error("{} did not answer the handshake: {}", key, reply.dump());
  KASSIGN(p->info, KvRankInfo::from_json(reply.at("rank")));
  if (p->info.compat != self_.compat)
    return make_error("{} holds an incompatible KV cache: [{}] here, [{}] there", key, self_.compat,
                      p->info.compat);
  const StateRankInfo &there = p->info.state, &here = self_.state;
  if (there.layers != here.layers || there.total_key_heads != here.total_key_heads ||
      there.qk_conv != here.qk_conv || there.v_conv != here.v_conv ||
      there.recurrent != here.recurrent)
    return make_error(
        "{} lays its linear-attention state out otherwise ({} layers, {} key heads; here {}, {})",
        key, there.layers, there.total_key_heads, here.layers, here.total_key_heads);
  if (p->info.planes != self_.planes || p->info.total_heads != self_.total_heads ||
      p->info.head_bytes != self_.head_bytes)
    return make_error(
        "{} lays its KV blocks out otherwise ({} planes, {} heads of {} bytes; here {}, {}, {})",
        key, p->info.planes, p->info.total_heads, p->info.head_bytes, self_.planes,
        self_.total_heads, self_.head_bytes);
  if (ucx_ && reply.contains("ucx")) {
    auto remote = ucx_->connect(reply["ucx"]);
    if (remote.ok()) {
      p->ucx = std::move(*remote);
    } else {
      KLOG_WARN("KV transfer: {} over TCP: {}", key, remote.error().message);
    }
  }
  return p;
}

void KvPuller::put_back(const std::string& key, std::unique_ptr<Peer> peer) {
  std::lock_guard lock(mu_);
  idle_.emplace(key, std::move(peer));
}

KvPullResult KvPuller::pull(const KvPullJob& job) {
  const Clock::time_point start = Clock::now();
  KvPullResult r;
  r.id = job.id;
  auto fail = [&](const std::string& why) {
    r.ok = false;
    r.error = why;
    return r;
  };
  if (job.remote_blocks.size() != job.local_blocks.size())
    return fail(fmt::format("{} remote blocks for {} local ones", job.remote_blocks.size(),
                            job.local_blocks.size()));
  for (int64_t b : job.local_blocks)
    if (b < 1 || b >= memory_.num_blocks)
      return fail(fmt::format("local block {} is not a block of this pool", b));
  const bool state = self_.state.layers > 0;
  if (state && job.remote_state < 0)
    return fail("the producer holds no linear-attention state for this request");
  if (state && (job.local_state < 0 || job.local_state >= memory_.state_entries))
    return fail(fmt::format("local state slot {} is not one of this rank's", job.local_state));
  if (job.local_blocks.empty() && !state) {
    r.ok = true;
    return r;
  }
  // This rank's heads, taken from the producer ranks that hold them (the first that does, for
  // heads several ranks replicate); a latent cache from one rank, spread by this rank's index.
  const Status heads = cover(
      job, self_.head_begin, self_.head_end, self_.latent ? self_.tp_rank % job.tp_size : 0,
      [](const KvRankInfo& i) { return std::pair(i.head_begin, i.head_end); },
      [&](Peer& peer, int h0, int h1) -> Status {
        if (job.local_blocks.empty()) return Status::Ok();
        bool over_ucx = false;
        KTRY(read_heads(peer, job, h0, h1, over_ucx));
        const int64_t bytes = int64_t(h1 - h0) * int64_t(memory_.head_bytes()) * memory_.planes *
                              int64_t(job.local_blocks.size());
        r.bytes += bytes;
        if (over_ucx) r.ucx_bytes += bytes;
        stats_.bytes_received += bytes;
        stats_.blocks_received += int64_t(job.local_blocks.size());
        return Status::Ok();
      });
  if (!heads.ok()) return fail(heads.message());
  if (state) {
    // And the request's state: this rank's linear-attention key heads the same way.
    const Status st = cover(
        job, self_.state.key_head_begin, self_.state.key_head_end, 0,
        [](const KvRankInfo& i) { return std::pair(i.state.key_head_begin, i.state.key_head_end); },
        [&](Peer& peer, int h0, int h1) -> Status {
          bool over_ucx = false;
          KTRY(read_state(peer, job, h0, h1, over_ucx));
          int64_t floats = 0;
          for (const StateRun& run : state_runs(self_.state, h0, h1)) floats += run.floats;
          const int64_t bytes = floats * int64_t(sizeof(float)) * memory_.state_layers;
          r.bytes += bytes;
          if (over_ucx) r.ucx_bytes += bytes;
          stats_.bytes_received += bytes;
          return Status::Ok();
        });
    if (!st.ok()) return fail(st.message());
  }
  r.ok = true;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

Status KvPuller::cover(const KvPullJob& job, int begin, int end, int first, const RangeOf& range_of,
                       const ReadPart& read) {
  int next = begin;
  for (int k = 0; k < job.tp_size && next < end; ++k) {
    const int port = job.port + (first + k) % job.tp_size;
    const std::string key = job.host + ":" + std::to_string(port);
    KASSIGN(std::unique_ptr<Peer> peer, this->peer(job.host, port, job.deadline));
    const auto [b, e] = range_of(peer->info);
    const int h0 = std::max(next, b), h1 = std::min(end, e);
    if (h0 != next || h1 <= h0) {  // this rank holds none of the heads still missing
      put_back(key, std::move(peer));
      continue;
    }
    if (Status st = read(*peer, h0, h1); !st.ok()) return make_error("{}: {}", key, st.message());
    next = h1;
    put_back(key, std::move(peer));
  }
  if (next < end)
    return make_error("no rank of the producer at {}:{} (TP {}) holds heads [{}, {})", job.host,
                      job.port, job.tp_size, next, end);
  return Status::Ok();
}

Status KvPuller::read_heads(Peer& peer, const KvPullJob& job, int h0, int h1, bool& over_ucx) {
  over_ucx = false;
  if (peer.ucx) {
    const Status st = read_ucx(peer, job, h0, h1);
    over_ucx = st.ok();
    if (st.ok()) return st;
    KLOG_WARN("KV transfer: a UCX read from {}:{} failed ({}); this rank is read over TCP now",
              job.host, job.port + peer.info.tp_rank, st.message());
    peer.ucx.reset();
  }
  return read_tcp(peer, job, h0, h1);
}

Status KvPuller::read_ucx(Peer& peer, const KvPullJob& job, int h0, int h1) {
  const KvRankInfo& remote = peer.info;
  for (int64_t b : job.remote_blocks)
    if (b < 1 || b >= remote.num_blocks)
      return make_error("block {} is not a block of the producer's pool (1-{})", b,
                        remote.num_blocks - 1);
  // The producer's pool as its rank lays it out: planes × blocks × its heads.
  const size_t remote_block_bytes = size_t(remote.head_end - remote.head_begin) * remote.head_bytes;
  const size_t slice = size_t(h1 - h0) * memory_.head_bytes();
  std::vector<UcxRead> reads;
  reads.reserve(size_t(memory_.planes) * job.local_blocks.size());
  for (int pl = 0; pl < memory_.planes; ++pl)
    for (size_t i = 0; i < job.local_blocks.size(); ++i) {
      const uint64_t offset =
          (uint64_t(pl) * uint64_t(remote.num_blocks) + uint64_t(job.remote_blocks[i])) *
              remote_block_bytes +
          uint64_t(h0 - remote.head_begin) * remote.head_bytes;
      reads.push_back(UcxRead{memory_.at(pl, job.local_blocks[i], h0 - self_.head_begin),
                              peer.ucx->base() + offset, slice});
    }
  KTRY(ucx_->read(*peer.ucx, reads, job.deadline));
  stats_.bytes_over_ucx += int64_t(slice * reads.size());
  return Status::Ok();
}

Status KvPuller::read_tcp(Peer& peer, const KvPullJob& job, int h0, int h1) {
  KTRY(peer.conn.send_message(
      {{"op", "read"}, {"blocks", job.remote_blocks}, {"head_begin", h0}, {"head_end", h1}},
      job.deadline));
  KASSIGN(const nlohmann::json header, peer.conn.recv_message(job.deadline));
  if (header.value("op", "") != "data")
    return make_error("{}", header.value("error", header.dump()));
  const size_t slice = size_t(h1 - h0) * memory_.head_bytes();
  std::vector<IoPiece> pieces;
  for (int pl = 0; pl < memory_.planes; ++pl)
    for (int64_t b : job.local_blocks)
      pieces.push_back(IoPiece{memory_.at(pl, b, h0 - self_.head_begin), slice});
  const int64_t bytes = int64_t(slice * pieces.size());
  if (header.value("bytes", int64_t(-1)) != bytes)
    return make_error("{} bytes announced, {} expected", header.value("bytes", int64_t(-1)), bytes);
  return peer.conn.recv_pieces(pieces, job.deadline);
}

Status KvPuller::read_state(Peer& peer, const KvPullJob& job, int h0, int h1, bool& over_ucx) {
  over_ucx = false;
  if (peer.ucx && peer.ucx->state_base() != 0) {
    const Status st = read_state_ucx(peer, job, h0, h1);
    over_ucx = st.ok();
    if (st.ok()) return st;
    KLOG_WARN("KV transfer: a UCX state read from {}:{} failed ({}); this rank is read over TCP",
              job.host, job.port + peer.info.tp_rank, st.message());
    peer.ucx.reset();
  }
  return read_state_tcp(peer, job, h0, h1);
}

Status KvPuller::read_state_ucx(Peer& peer, const KvPullJob& job, int h0, int h1) {
  const StateRankInfo& remote = peer.info.state;
  if (job.remote_state >= remote.entries)
    return make_error("state slot {} is not one of the producer's {}", job.remote_state,
                      remote.entries);
  const std::vector<StateRun> there = state_runs(remote, h0, h1);
  const std::vector<StateRun> here = state_runs(self_.state, h0, h1);
  const uint64_t per_layer = uint64_t(remote.floats_per_layer()) * sizeof(float);
  std::vector<UcxRead> reads;
  for (int32_t layer = 0; layer < memory_.state_layers; ++layer) {
    const uint64_t layer_base =
        peer.ucx->state_base() +
        (uint64_t(job.remote_state) * uint64_t(remote.layers) + layer) * per_layer;
    for (size_t i = 0; i < here.size(); ++i)
      reads.push_back(UcxRead{
          reinterpret_cast<uint8_t*>(memory_.state_at(job.local_state, layer) + here[i].offset),
          layer_base + uint64_t(there[i].offset) * sizeof(float),
          size_t(here[i].floats) * sizeof(float)});
  }
  KTRY(ucx_->read(*peer.ucx, reads, job.deadline));
  int64_t bytes = 0;
  for (const UcxRead& x : reads) bytes += int64_t(x.bytes);
  stats_.bytes_over_ucx += bytes;
  return Status::Ok();
}

Status KvPuller::read_state_tcp(Peer& peer, const KvPullJob& job, int h0, int h1) {
  KTRY(peer.conn.send_message({{"op", "read_state"},
                               {"slot", job.remote_state},
                               {"key_head_begin", h0},
                               {"key_head_end", h1}},
                              job.deadline));
  KASSIGN(const nlohmann::json header, peer.conn.recv_message(job.deadline));
  if (header.value("op", "") != "data")
    return make_error("{}", header.value("error", header.dump()));
  std::vector<IoPiece> pieces;
  int64_t bytes = 0;
  for (int32_t layer = 0; layer < memory_.state_layers; ++layer)
    for (const StateRun& run : state_runs(self_.state, h0, h1)) {
      pieces.push_back(IoPiece{memory_.state_at(job.local_state, layer) + run.offset,
                               size_t(run.floats) * sizeof(float)});
      bytes += run.floats * int64_t(sizeof(float));
    }
  if (header.value("bytes", int64_t(-1)) != bytes)
    return make_error("{} state bytes announced, {} expected", header.value("bytes", int64_t(-1)),
                      bytes);
  return peer.conn.recv_pieces(pieces, job.deadline);
}

}  // namespace kestrel
