#include "kvx/kv_server.h"

#include <vector>

#include "base/logging.h"

namespace kestrel {

namespace {

nlohmann::json error_reply(const std::string& why) {
  return {{"op", "error"}, {"error", why}};
}

}  // namespace

Expected<std::unique_ptr<KvServer>> KvServer::start(const std::string& host, int port,
                                                    KVMemoryView memory, KvRankInfo info,
                                                    KvControlHandler control, nlohmann::json ucx) {
  KASSIGN(TcpListener listener, TcpListener::listen(host, port));
  return std::unique_ptr<KvServer>(new KvServer(std::move(listener), memory, std::move(info),
                                                std::move(control), std::move(ucx)));
}

KvServer::KvServer(TcpListener listener, KVMemoryView memory, KvRankInfo info,
                   KvControlHandler control, nlohmann::json ucx)
    : listener_(std::move(listener)),
      port_(listener_.port()),
      memory_(memory),
      info_(std::move(info)),
      control_(std::move(control)),
      ucx_(std::move(ucx)) {
  accept_thread_ = std::thread([this] { accept_loop(); });
}

KvServer::~KvServer() {
  stop_.store(true);
  accept_thread_.join();
  std::list<Conn> conns;
  {
    std::lock_guard lock(mu_);
    for (Conn& c : conns_) c.conn.shutdown();
    conns.swap(conns_);
  }
  for (Conn& c : conns) c.thread.join();
}

void KvServer::accept_loop() {
  while (!stop_.load()) {
    auto next = listener_.accept(std::chrono::milliseconds(100));
    std::lock_guard lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!it->done.load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = conns_.erase(it);
    }
    if (!next.ok() || !next->has_value()) continue;
    Conn& c = conns_.emplace_back();
    c.conn = std::move(**next);
    c.thread = std::thread([this, &c] { serve(c); });
  }
}

void KvServer::serve(Conn& c) {
  TcpConn& conn = c.conn;
  while (!stop_.load()) {
    // An idle connection may wait long for its next request (a consumer keeps it pooled).
    auto request = conn.recv_message(deadline_in(std::chrono::hours(24 * 365)));
    if (!request.ok()) break;
    const std::string op = request->value("op", "");
    Status sent;
    if (op == "hello") {
      nlohmann::json hello = {{"op", "hello"}, {"rank", info_.to_json()}};
      if (!ucx_.is_null()) hello["ucx"] = ucx_;
      sent = conn.send_message(hello, deadline_in(kIoTimeout));
    } else if (op == "read") {
      sent = send_blocks(conn, *request);
    } else if (op == "read_state") {
      sent = send_state(conn, *request);
    } else if (control_) {
      sent = conn.send_message(control_(*request), deadline_in(kIoTimeout));
    } else {
      sent =
          conn.send_message(error_reply("unknown request '" + op + "'"), deadline_in(kIoTimeout));
    }
    if (!sent.ok()) break;
  }
  conn.shutdown();
  c.done.store(true);
}

Status KvServer::send_blocks(TcpConn& conn, const nlohmann::json& request) {
  std::vector<int64_t> blocks;
  int h0 = 0, h1 = 0;
  try {
    blocks = request.at("blocks").get<std::vector<int64_t>>();
    h0 = request.at("head_begin").get<int>();
    h1 = request.at("head_end").get<int>();
  } catch (const nlohmann::json::exception& e) {
    return conn.send_message(error_reply(std::string("a malformed read: ") + e.what()),
                             deadline_in(kIoTimeout));
  }
  if (h0 < info_.head_begin || h1 > info_.head_end || h0 >= h1)
    return conn.send_message(
        error_reply(fmt::format("heads [{}, {}) are not all on this rank ([{}, {}))", h0, h1,
                                info_.head_begin, info_.head_end)),
        deadline_in(kIoTimeout));
  for (int64_t b : blocks)
    if (b < 1 || b >= memory_.num_blocks)
      return conn.send_message(
          error_reply(fmt::format("block {} is not a block of this pool (1-{})", b,
                                  memory_.num_blocks - 1)),
          deadline_in(kIoTimeout));
  const size_t slice = size_t(h1 - h0) * memory_.head_bytes();
  std::vector<IoPiece> pieces;
  pieces.reserve(size_t(memory_.planes) * blocks.size());
  for (int p = 0; p < memory_.planes; ++p)
    for (int64_t b : blocks)
      pieces.push_back(IoPiece{memory_.at(p, b, h0 - info_.head_begin), slice});
  const int64_t bytes = int64_t(slice * pieces.size());
  KTRY(conn.send_message({{"op", "data"}, {"bytes", bytes}}, deadline_in(kIoTimeout)));
  // A generous deadline for the body: at least the I/O timeout, more for large reads.
  KTRY(conn.send_pieces(pieces,
                        deadline_in(kIoTimeout + std::chrono::milliseconds(bytes / 100000))));
  stats_.bytes_sent += bytes;
  stats_.blocks_sent += int64_t(blocks.size());
  ++stats_.reads;
  return Status::Ok();
}

Status KvServer::send_state(TcpConn& conn, const nlohmann::json& request) {
  int32_t slot = 0;
  int h0 = 0, h1 = 0;
  try {
    slot = request.at("slot").get<int32_t>();
    h0 = request.at("key_head_begin").get<int>();
    h1 = request.at("key_head_end").get<int>();
  } catch (const nlohmann::json::exception& e) {
    return conn.send_message(error_reply(std::string("a malformed state read: ") + e.what()),
                             deadline_in(kIoTimeout));
  }
  const StateRankInfo& s = info_.state;
  std::string bad;
  if (s.layers == 0 || memory_.state == nullptr)
    bad = "this rank keeps no linear-attention state";
  else if (slot < 0 || slot >= memory_.state_entries)
    bad = fmt::format("state slot {} is not one of this rank's {}", slot, memory_.state_entries);
  else if (h0 < s.key_head_begin || h1 > s.key_head_end || h0 >= h1)
    bad = fmt::format("key heads [{}, {}) are not all on this rank ([{}, {}))", h0, h1,
                      s.key_head_begin, s.key_head_end);
  if (!bad.empty()) return conn.send_message(error_reply(bad), deadline_in(kIoTimeout));
  std::vector<IoPiece> pieces;
  int64_t bytes = 0;
  for (int32_t layer = 0; layer < memory_.state_layers; ++layer)
    for (const StateRun& run : state_runs(s, h0, h1)) {
      pieces.push_back(
          IoPiece{memory_.state_at(slot, layer) + run.offset, size_t(run.floats) * sizeof(float)});
      bytes += run.floats * int64_t(sizeof(float));
    }
  KTRY(conn.send_message({{"op", "data"}, {"bytes", bytes}}, deadline_in(kIoTimeout)));
  KTRY(conn.send_pieces(pieces,
                        deadline_in(kIoTimeout + std::chrono::milliseconds(bytes / 100000))));
  stats_.bytes_sent += bytes;
  ++stats_.reads;
  return Status::Ok();
}

}  // namespace kestrel
