// The HTTP layer's pure helpers: SSE framing, error bodies, response heads, header lookup,
// signal waiting.
#include <csignal>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http/json_error.h"
#include "server/http/request.h"
#include "server/http/signals.h"
#include "server/http/sse.h"
#include "server/http/wire.h"

namespace kestrel::server {
namespace {

TEST(SseTest, FramesDataAndDone) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(SseTest, MultiLinePayloadGetsOneDataLinePerLine) {
  EXPECT_EQ(sse_data("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(sse_data(""), "data: \n\n");
}

TEST(JsonErrorTest, HasOpenAiShape) {
  auto j = nlohmann::json::parse(json_error_body(400, "BadRequestError", "bad \"thing\""));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"error":{"message":"bad \"thing\"",)"
                                     R"("type":"BadRequestError","param":null,"code":400}})"));
}

TEST(JsonErrorTest, InvalidUtf8InMessageDoesNotThrow) {
  std::string body = json_error_body(400, "BadRequestError", "bad \xff byte");
  EXPECT_NO_THROW(nlohmann::json::parse(body));
}

TEST(WireTest, ChunkFraming) {
  EXPECT_EQ(format_chunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(format_chunk(std::string(26, 'x')), "1a\r\n" + std::string(26, 'x') + "\r\n");
  EXPECT_EQ(kLastChunk, "0\r\n\r\n");
}

TEST(WireTest, ResponseHeadKeepsFramingToTheServer) {
  HeaderList extra = {{"X-Request-Id", "abc"},
                      {"Content-Length", "999"},
                      {"X-Evil", "a\r\nSet-Cookie: x"},
                      {"Bad Name", "v"}};
  std::string head = format_response_head({.status = 200,
                                           .version = 11,
                                           .content_type = "application/json",
                                           .content_length = 12,
                                           .chunked = false,
                                           .close = true,
                                           .extra = &extra});
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_NE(head.find("\r\nContent-Length: 12\r\n"), std::string::npos);
  EXPECT_EQ(head.find("999"), std::string::npos);
  EXPECT_NE(head.find("\r\nX-Request-Id: abc\r\n"), std::string::npos);
  EXPECT_EQ(head.find("Set-Cookie"), std::string::npos);
  EXPECT_EQ(head.find("Bad Name"), std::string::npos);
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

TEST(WireTest, ChunkedHeadForHttp11AndKeepAliveForHttp10) {
  std::string chunked = format_response_head(
      {.status = 404, .version = 11, .content_type = "", .content_length = {}, .chunked = true});
  EXPECT_EQ(chunked.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_NE(chunked.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_EQ(chunked.find("Content-Type"), std::string::npos);
  EXPECT_EQ(chunked.find("Connection"), std::string::npos);
  std::string old =
      format_response_head({.status = 299, .version = 10, .content_type = "", .content_length = 0});
  EXPECT_EQ(old.rfind("HTTP/1.0 299 Unknown\r\n", 0), 0u);
  EXPECT_NE(old.find("\r\nConnection: keep-alive\r\n"), std::string::npos);
}

TEST(WireTest, HttpDateIsImfFixdate) {
  // 784111777 s after the epoch is the RFC 7231 example date.
  auto t = std::chrono::system_clock::from_time_t(784111777);
  EXPECT_EQ(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
}

TEST(RequestTest, HeaderLookupIgnoresCase) {
  HttpRequest req;
  req.headers = {{"Content-Type", "application/json"}, {"X-A", "1"}, {"x-a", "2"}};
  EXPECT_EQ(req.header("content-type"), "application/json");
  EXPECT_EQ(req.header("X-a"), "1");  // first wins
  EXPECT_FALSE(req.header("Authorization").has_value());
  EXPECT_TRUE(iequals("Keep-Alive", "keep-alive"));
  EXPECT_FALSE(iequals("keep-alive", "keep-alivf"));
}

TEST(SignalWaiterTest, ReturnsTheSignalThatArrived) {
  SignalWaiter waiter({SIGUSR2});
  std::raise(SIGUSR2);  // caught even though nobody waits yet
  EXPECT_EQ(waiter.wait(), SIGUSR2);
}

TEST(SignalWaiterTest, CancelFromAnotherThreadEndsTheWait) {
  SignalWaiter waiter({SIGUSR2});
  std::thread canceller([&] { waiter.cancel(); });
  EXPECT_EQ(waiter.wait(), 0);
  canceller.join();
}

}  // namespace
}  // namespace kestrel::server
