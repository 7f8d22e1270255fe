// server/http/connection.h — one accepted TCP connection (internal to the HTTP server).
//
// Everything here runs on the connection's strand. One read is always pending while the
// connection is open, also while a handler computes or a stream is written: that is how a client
// that goes away is noticed at once. Bytes read while a response is pending are kept for the next
// request.
#pragma once

#include <array>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/request.h"
#include "server/http/responder.h"
#include "server/http/router.h"
#include "server/http/server_options.h"

namespace kestrel::server::detail {

// What a connection needs from the server that accepted it; outlives the connection's I/O.
class ConnectionOwner {
 public:
  virtual const HttpServerOptions& options() const = 0;
  virtual const Router& router() const = 0;
  virtual bool stopping() const = 0;
  virtual void connection_closed(uint64_t id) = 0;

 protected:
  ~ConnectionOwner() = default;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, uint64_t id, ConnectionOwner& owner);

  // Thread-safe entry points (each hops onto the strand).
  void start();
  void start_rejecting(int status, std::string type, std::string message);
  void close_if_idle();
  void force_close();

  boost::asio::any_io_executor executor() { return socket_.get_executor(); }

  // Strand only: the Responder's requests. Ignored unless `r` is the current exchange.
  void write_response(const Responder* r, int status, std::string content_type, HeaderList extra,
                      std::string body);
  void write_stream_head(const Responder* r, int status, std::string content_type,
                         HeaderList extra);
  void write_chunk(const Responder* r, std::string data);
  void write_stream_end(const Responder* r);
  void abort_exchange(const Responder* r);

 private:
  enum class Phase { kAwaitRequest, kHandling, kResponding, kLingering, kClosed };
  enum class Stage { kIdle, kHead, kBody };  // progress of the request being read
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  void start_read();
  void on_read(boost::system::error_code ec, size_t n);
  void parse_buffered();
  void maybe_send_continue();
  void reject_request(boost::system::error_code ec);
  void send_error_and_close(int status, std::string_view type, std::string_view message);
  void dispatch();
  void kick_write();
  void on_write(boost::system::error_code ec);
  void finish_response();
  void close_now();

  void arm_read_timer(std::chrono::milliseconds after);
  void disarm_read_timer();
  void on_read_timer(boost::system::error_code ec);
  void on_write_timer(boost::system::error_code ec);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  const uint64_t id_;
  ConnectionOwner& owner_;
  std::string remote_ip_;
  uint16_t remote_port_ = 0;

  Phase phase_ = Phase::kAwaitRequest;
  Stage stage_ = Stage::kIdle;
  // Bytes received and not yet parsed. The socket never reads into it directly: a read is always
  // pending, and the parser consuming buffer_ meanwhile would move the region that read targets.
  boost::beast::flat_buffer buffer_;
  std::array<char, 16 * 1024> read_chunk_;
  std::optional<Parser> parser_;

  // The exchange in progress.
  std::shared_ptr<Responder> responder_;
  int version_ = 11;
  bool keep_alive_ = true;
  bool head_request_ = false;  // HEAD: the head is sent, never a body
  bool chunked_ = false;
  bool final_queued_ = false;  // the last bytes of the response are in out_
  bool close_after_ = false;
  bool linger_after_ = false;  // drain the client's unread request before closing

  std::deque<std::string> out_;  // deque: queued strings stay put while a write references them
  std::vector<boost::asio::const_buffer> write_bufs_;
  size_t in_flight_ = 0;  // leading entries of out_ being written
  bool writing_ = false;
};

}  // namespace kestrel::server::detail
