// Synchronous HTTP/1.1 test client on Beast. Every operation has a deadline so a broken server
// fails a test instead of hanging it.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace kestrel::server::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Response = http::response<http::string_body>;

inline net::io_context& client_io() {
  static net::io_context ioc;
  return ioc;
}

class TestClient {
 public:
  explicit TestClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5))
      : stream_(client_io()), timeout_(timeout) {
    stream_.socket().connect({net::ip::make_address("127.0.0.1"), port}, connect_error_);
  }

  // Empty when the connection was established.
  boost::system::error_code connect_error() const { return connect_error_; }
  uint16_t local_port() const { return stream_.socket().local_endpoint().port(); }

  boost::system::error_code send(
      std::string_view method, std::string_view target, std::string body = "",
      const std::vector<std::pair<std::string, std::string>>& headers = {}, int version = 11) {
    http::request<http::string_body> req;
    req.method_string(beast::string_view(method.data(), method.size()));
    req.target(beast::string_view(target.data(), target.size()));
    req.version(version);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    req.prepare_payload();
    return run([&](auto handler) { http::async_write(stream_, req, handler); });
  }

  boost::system::error_code write_raw(std::string_view bytes) {
    return run([&](auto handler) { net::async_write(stream_, net::buffer(bytes), handler); });
  }

  // Reads one response; its result() is 0 if reading failed.
  Response read_response(boost::system::error_code* error = nullptr) {
    Response res;
    auto ec = run([&](auto handler) { http::async_read(stream_, buffer_, res, handler); });
    if (error) *error = ec;
    if (ec) res.result(0);
    return res;
  }

  Response request(std::string_view method, std::string_view target, std::string body = "",
                   const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    if (send(method, target, std::move(body), headers)) return Response{};
    return read_response();
  }

  // Reads raw bytes up to and including `delim`; empty on failure.
  std::string read_until(std::string_view delim) {
    while (true) {
      std::string_view have(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      if (size_t pos = have.find(delim); pos != std::string_view::npos) {
        std::string out(have.substr(0, pos + delim.size()));
        buffer_.consume(out.size());
        return out;
      }
      size_t got = 0;
      auto ec = run([&](auto handler) {
        stream_.async_read_some(buffer_.prepare(4096),
                                [&got, handler](boost::system::error_code e, size_t n) mutable {
                                  got = n;
                                  handler(e, n);
                                });
      });
      if (ec) return "";
      buffer_.commit(got);
    }
  }

  // True if the server closes the connection (EOF or reset) before the deadline, discarding any
  // bytes that arrive first. Uses poll/recv directly: Asio waits forever for a second EOF on a
  // socket whose first EOF an earlier read already consumed.
  bool wait_closed() {
    buffer_.consume(buffer_.size());
    int fd = stream_.socket().native_handle();
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
  }

  template <typename Parser>
  boost::system::error_code read_header(Parser& parser) {
    return run([&](auto handler) { http::async_read_header(stream_, buffer_, parser, handler); });
  }

  template <typename Parser>
  boost::system::error_code read_some(Parser& parser) {
    return run([&](auto handler) { http::async_read_some(stream_, buffer_, parser, handler); });
  }

  void close() {
    boost::system::error_code ignored;
    stream_.socket().close(ignored);
  }

 private:
  // Runs one asynchronous operation to completion on the calling thread.
  template <typename Start>
  boost::system::error_code run(Start start) {
    boost::system::error_code result = net::error::would_block;
    stream_.expires_after(timeout_);
    start([&result](boost::system::error_code ec, size_t) { result = ec; });
    client_io().restart();
    client_io().run();
    return result;
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::chrono::milliseconds timeout_;
  boost::system::error_code connect_error_;
};

}  // namespace kestrel::server::testing
