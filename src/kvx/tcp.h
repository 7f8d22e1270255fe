// kvx/tcp.h — blocking TCP with deadlines for the KV transfer path (issue 21): a connection
// sends and receives exact byte counts (scattered or not) or fails at its deadline — never
// blocks past it — and frames messages as a 4-byte length then msgpack; a listener accepts with
// a timeout so its thread can stop. A peer that vanishes surfaces as an error on the next
// operation (sends never raise SIGPIPE).
//
// A TcpConn is used by one thread at a time; shutdown() may come from another thread to make a
// blocked operation fail at once.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

// One contiguous piece of a scattered transfer.
struct IoPiece {
  void* data;
  size_t size;
};

class TcpConn {
 public:
  TcpConn() = default;
  explicit TcpConn(int fd) : fd_(fd) {}
  ~TcpConn();
  TcpConn(TcpConn&& o) noexcept;
  TcpConn& operator=(TcpConn&& o) noexcept;
  TcpConn(const TcpConn&) = delete;
  TcpConn& operator=(const TcpConn&) = delete;

  static Expected<TcpConn> connect(const std::string& host, int port, Deadline deadline);

  Status send_all(const void* data, size_t n, Deadline deadline);
  Status recv_all(void* data, size_t n, Deadline deadline);
  // The pieces in order, with as few system calls as the kernel allows.
  Status send_pieces(std::span<const IoPiece> pieces, Deadline deadline);
  Status recv_pieces(std::span<const IoPiece> pieces, Deadline deadline);
  // A message: its msgpack bytes behind a 4-byte length (at most `max_bytes` when receiving).
  Status send_message(const nlohmann::json& message, Deadline deadline);
  Expected<nlohmann::json> recv_message(Deadline deadline, size_t max_bytes = size_t(1) << 24);

  bool is_open() const { return fd_ >= 0; }
  // Makes every blocked and later operation fail (from any thread).
  void shutdown();
  void close();

 private:
  // Waits until the socket is readable (or writable); an error at the deadline.
  Status wait(bool for_write, Deadline deadline);
  int fd_ = -1;
};

class TcpListener {
 public:
  TcpListener() = default;
  ~TcpListener();
  TcpListener(TcpListener&& o) noexcept;
  TcpListener& operator=(TcpListener&& o) noexcept;

  // Listens on host:port (port 0: the OS picks one; host "0.0.0.0": every interface).
  static Expected<TcpListener> listen(const std::string& host, int port);
  // The next connection, or none by `timeout` (so the accepting thread can check for a stop).
  Expected<std::optional<TcpConn>> accept(std::chrono::milliseconds timeout);
  int port() const { return port_; }
  void close();

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace kestrel
