#include "bench/sync_http.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <optional>

namespace kestrel::bench {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

namespace {
constexpr std::chrono::seconds kCallTimeout{60};
}

struct SyncHttpClient::Conn {
  boost::asio::io_context io;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

SyncHttpClient::SyncHttpClient(std::string host, uint16_t port, std::string api_key)
    : host_(std::move(host)), port_(port), api_key_(std::move(api_key)) {}

SyncHttpClient::~SyncHttpClient() = default;

Expected<HttpReply> SyncHttpClient::get(const std::string& path) {
  return call(false, path, "");
}

Expected<HttpReply> SyncHttpClient::post_json(const std::string& path, const std::string& body) {
  return call(true, path, body);
}

Expected<HttpReply> SyncHttpClient::call(bool post, const std::string& path,
                                         const std::string& body) {
  // A kept-alive connection the server has since closed fails on first use: retry once fresh.
  std::string last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool fresh = conn_ == nullptr;
    try {
      if (fresh) {
        conn_ = std::make_unique<Conn>();
        conn_->stream.emplace(conn_->io);
        conn_->stream->expires_after(kCallTimeout);
        conn_->stream->connect(tcp::resolver(conn_->io).resolve(host_, std::to_string(port_)));
      }
      http::request<http::string_body> req{post ? http::verb::post : http::verb::get, path, 11};
      req.set(http::field::host, host_);
      if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
      if (post) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
      }
      req.prepare_payload();
      conn_->stream->expires_after(kCallTimeout);
      http::write(*conn_->stream, req);
      http::response<http::string_body> res;
      http::read(*conn_->stream, conn_->buffer, res);
      HttpReply reply{static_cast<int>(res.result_int()), std::move(res.body())};
      if (!res.keep_alive()) conn_.reset();
      return reply;
    } catch (const std::exception& e) {
      last_error = e.what();
      conn_.reset();
      if (fresh) break;
    }
  }
  return make_error("{} http://{}:{}{} failed: {}", post ? "POST" : "GET", host_, port_, path,
                    last_error);
}

}  // namespace kestrel::bench
