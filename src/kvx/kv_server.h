// kvx/kv_server.h — a producer rank's KV server (issue 21): a TCP listener on the rank's port of
// the instance's block (kv_port + dp_rank · tp_size + tp_rank) that answers, per connection and
// in order:
//   hello              → the rank's KvRankInfo (engine, incarnation, compatibility key, heads),
//                        and its UCX advertisement when it has one (kvx/ucx_transport.h)
//   read blocks h0 h1  → a header with the byte count, then heads [h0, h1) of every listed block
//                        of every plane, plane by plane, written straight from the KV pool
//   read_state slot h0 h1 → a header with the byte count, then the runs of linear-attention key
//                        heads [h0, h1) of state slot `slot`, layer by layer (kvx/kv_rank.h)
//   anything else      → the control handler's answer (rank 0: the engine's leases), or an error
// Reads take no lock: the blocks a consumer reads belong to finished requests that the producer
// holds under a lease, which no forward pass writes; the consumer confirms the lease after the
// read (a lease that lapsed meanwhile voids what it read). A state slot read is a held one: the
// lease holds it with the blocks. A connection that sends garbage or
// stalls past the I/O timeout is closed; the server itself keeps serving.
//
// Owns its accept thread and one thread per connection; stopped (and joined) by its destructor.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvx/kv_rank.h"
#include "kvx/tcp.h"

namespace kestrel {

// Answers the control messages (thread-safe; called from connection threads).
using KvControlHandler = std::function<nlohmann::json(const nlohmann::json&)>;

struct KvServerStats {
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> blocks_sent{0};
  std::atomic<int64_t> reads{0};
};

class KvServer {
 public:
  // `ucx`: the rank's UCX advertisement for the hello (null: none).
  static Expected<std::unique_ptr<KvServer>> start(const std::string& host, int port,
                                                   KVMemoryView memory, KvRankInfo info,
                                                   KvControlHandler control = {},
                                                   nlohmann::json ucx = nullptr);
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  int port() const { return port_; }
  const KvServerStats& stats() const { return stats_; }

  // How long a connection may take over one message or reply before it is dropped.
  static constexpr std::chrono::seconds kIoTimeout{30};

 private:
  struct Conn {
    TcpConn conn;
    std::thread thread;
    std::atomic<bool> done{false};  // its thread has finished: join and drop it
  };
  KvServer(TcpListener listener, KVMemoryView memory, KvRankInfo info, KvControlHandler control,
           nlohmann::json ucx);
  void accept_loop();
  void serve(Conn& conn);
  // A read's reply: its header then the bytes, or an error reply.
  Status send_blocks(TcpConn& conn, const nlohmann::json& request);
  Status send_state(TcpConn& conn, const nlohmann::json& request);

  TcpListener listener_;
  int port_;
  KVMemoryView memory_;
  KvRankInfo info_;
  KvControlHandler control_;
  nlohmann::json ucx_;
  KvServerStats stats_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards conns_
  std::list<Conn> conns_;
  std::thread accept_thread_;
};

}  // namespace kestrel
