// proxy/upstream.h — the PD proxy's HTTP/1.1 client: one exchange with a backend, asynchronous
// on an Asio strand (resolve, connect within a timeout, send, read the head, then the body in
// pieces as they arrive, each read within an idle timeout). One connection per exchange, so a
// cancelled exchange (the client went away) closes exactly its backend connection, which the
// backend takes as an abort.
//
// Every handler runs on the exchange's strand; cancel() may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "server/http/request.h"

namespace kestrel::proxy {

using Strand = boost::asio::strand<boost::asio::any_io_executor>;

struct UpstreamRequest {
  std::string host;
  uint16_t port = 0;
  std::string method = "POST";
  std::string target;
  server::HeaderList headers;  // besides Host, Content-Type (a body's) and Content-Length
  std::string body;
  std::chrono::milliseconds connect_timeout{10000};
  // Longest wait for the next bytes of the response (a prefill of a long prompt, a quiet stream).
  std::chrono::milliseconds idle_timeout{600000};
};

struct UpstreamHandlers {
  std::function<void(int status, const server::HeaderList& headers)> on_head;
  std::function<void(std::string_view bytes)> on_data;
  // Last: empty when the response was read whole; else why not. `connected` tells whether the
  // request may have reached the backend (a refused connection never did).
  std::function<void(const std::string& error, bool connected)> on_end;
};

class UpstreamCall : public std::enable_shared_from_this<UpstreamCall> {
 public:
  static std::shared_ptr<UpstreamCall> start(Strand strand, UpstreamRequest request,
                                             UpstreamHandlers handlers);
  // Closes the connection; on_end runs with "cancelled" unless the exchange already ended.
  void cancel();

  UpstreamCall(Strand strand, UpstreamRequest request, UpstreamHandlers handlers);

 private:
  void begin();
  void on_resolved(const boost::system::error_code& ec,
                   const boost::asio::ip::tcp::resolver::results_type& endpoints);
  void on_connected(const boost::system::error_code& ec);
  void on_written(const boost::system::error_code& ec);
  void on_head(const boost::system::error_code& ec);
  void read_some();
  void on_read(boost::system::error_code ec);
  void arm(std::chrono::milliseconds timeout, const char* what);
  void end(const std::string& error);

  Strand strand_;
  UpstreamRequest request_;
  UpstreamHandlers handlers_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  boost::beast::http::request<boost::beast::http::string_body> http_request_;
  boost::beast::http::response_parser<boost::beast::http::buffer_body> parser_;
  std::array<char, 16384> chunk_;
  std::string timed_out_;  // what timed out, when the timer closed the socket
  bool connected_ = false;
  bool done_ = false;
};

// A whole response (bodies past max_body are an error).
struct UpstreamReply {
  int status = 0;
  server::HeaderList headers;
  std::string body;
  std::string error;  // the exchange failed: no status
  bool connected = false;
};

std::shared_ptr<UpstreamCall> fetch(Strand strand, UpstreamRequest request,
                                    std::function<void(UpstreamReply)> done,
                                    size_t max_body = 64u << 20);

}  // namespace kestrel::proxy
