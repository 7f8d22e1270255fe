// Hostile and broken clients must not disturb the others: garbage bytes, truncated bodies,
// oversized heads and clients that vanish mid-request each get an error or a closed connection
// while a well-behaved client keeps being served.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "http_test_client.h"
#include "server/http/http_server.h"

namespace kestrel::server {
namespace {

using namespace std::chrono_literals;
using testing::TestClient;

class HttpRobustness : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.header_timeout = 500ms;
    o.body_timeout = 500ms;
    o.max_header_bytes = 8 << 10;
    server_ = std::make_unique<HttpServer>(o);
    server_->route("POST", "/echo", [this](const HttpRequest& req, std::shared_ptr<Responder> r) {
      ++handled_;
      r->respond(200, "text/plain", req.body);
    });
    ASSERT_TRUE(server_->start().ok());
  }

  // A fresh, well-behaved client still gets its answer.
  void expect_healthy() {
    TestClient c(server_->port());
    const auto res = c.request("POST", "/echo", "ping");
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_EQ(res.body(), "ping");
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
};

TEST_F(HttpRobustness, OversizedHeadIs431) {
  TestClient c(server_->port());
  const std::string big(16 << 10, 'a');
  ASSERT_FALSE(c.write_raw("POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n"));
  EXPECT_EQ(c.read_response().result_int(), 431);
  expect_healthy();
}

TEST_F(HttpRobustness, TruncatedBodyNeverReachesTheHandler) {
  {
    TestClient c(server_->port());
    ASSERT_FALSE(c.write_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort"));
    // The client goes away with 95 bytes missing.
  }
  TestClient stalled(server_->port());
  ASSERT_FALSE(
      stalled.write_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort"));
  EXPECT_TRUE(stalled.wait_closed()) << "a body that never completes times out";
  expect_healthy();
  EXPECT_EQ(handled_.load(), 1) << "only the healthy request reached the handler";
}

TEST_F(HttpRobustness, GarbageFromManyClientsLeavesOthersServed) {
  std::mt19937 rng(20261130);
  std::vector<std::unique_ptr<TestClient>> hostile;
  const std::vector<std::string> prefixes = {"", "GET / HTTP/1.1\r\n", "POST /echo HTTP/1.1\r\n",
                                             "POST /echo HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                                             "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked"
                                             "\r\n\r\nzz\r\n"};
  for (int i = 0; i < 40; ++i) {
    auto c = std::make_unique<TestClient>(server_->port());
    std::string bytes = prefixes[size_t(i) % prefixes.size()];
    const int n = std::uniform_int_distribution<int>(1, 4096)(rng);
    for (int k = 0; k < n; ++k) bytes += char(std::uniform_int_distribution<int>(0, 255)(rng));
    c->write_raw(bytes);
    hostile.push_back(std::move(c));
    if (i % 10 == 0) expect_healthy();
  }
  expect_healthy();
  // Every hostile connection ends: answered with an error and closed, or timed out.
  for (auto& c : hostile) EXPECT_TRUE(c->wait_closed());
  expect_healthy();
}

TEST_F(HttpRobustness, RequestSplitAcrossReadsAfterAPipelinedOneKeepsItsBytes) {
  // A's bytes, then B's head and the start of B's body in the same segment; the rest of B's body
  // arrives only after A has been answered. Each body must come back exactly.
  for (int round = 0; round < 20; ++round) {
    TestClient c(server_->port());
    const std::string a = "{\"a\":" + std::to_string(round) + "}";
    const std::string b = std::string(120, char('a' + round % 26)) + "-tail";
    auto head = [](const std::string& body) {
      return "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n";
    };
    ASSERT_FALSE(c.write_raw(head(a) + a + head(b) + b.substr(0, 50)));
    const auto ra = c.read_response();
    ASSERT_EQ(ra.result_int(), 200);
    EXPECT_EQ(ra.body(), a);
    ASSERT_FALSE(c.write_raw(b.substr(50)));
    const auto rb = c.read_response();
    ASSERT_EQ(rb.result_int(), 200) << "round " << round;
    EXPECT_EQ(rb.body(), b) << "round " << round;
    // And a third request on the same connection, sent whole.
    const auto rc = c.request("POST", "/echo", "third");
    EXPECT_EQ(rc.body(), "third");
  }
}

}  // namespace
}  // namespace kestrel::server
