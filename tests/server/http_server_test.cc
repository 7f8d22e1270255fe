// HttpServer over real sockets on 127.0.0.1.
#include "server/http/http_server.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_test_client.h"
#include "server/http/json_error.h"
#include "server/http/sse.h"

namespace kestrel::server {
namespace {

using namespace std::chrono_literals;
using testing::Response;
using testing::TestClient;
namespace http = boost::beast::http;

constexpr auto kWait = 5s;

HttpServerOptions test_options() {
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.keep_alive_timeout = 30s;
  return o;
}

void echo_handler(const HttpRequest& req, std::shared_ptr<Responder> r) {
  nlohmann::json j = {{"method", req.method},
                      {"path", req.path},
                      {"query", req.query},
                      {"body", req.body},
                      {"x_test", std::string(req.header("x-test").value_or("<none>"))},
                      {"remote_ip", req.remote_ip},
                      {"remote_port", req.remote_port}};
  r->respond(200, "application/json", j.dump(), {{"X-Handler", "echo"}});
}

std::unique_ptr<HttpServer> start_server(HttpServerOptions options,
                                         const std::function<void(HttpServer&)>& add_routes) {
  auto server = std::make_unique<HttpServer>(std::move(options));
  server->route("POST", "/echo", echo_handler);
  server->route("GET", "/echo", echo_handler);
  add_routes(*server);
  Status st = server->start();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_NE(server->port(), 0);
  return server;
}

std::unique_ptr<HttpServer> start_server(HttpServerOptions options = test_options()) {
  return start_server(std::move(options), [](HttpServer&) {});
}

nlohmann::json error_of(const Response& res) {
  return nlohmann::json::parse(res.body())["error"];
}

template <typename T>
T get_within(std::future<T>& f) {
  EXPECT_EQ(f.wait_for(kWait), std::future_status::ready);
  return f.get();
}

TEST(HttpServerTest, RoutesRequestWithItsDetails) {
  auto server = start_server();
  TestClient c(server->port());
  ASSERT_FALSE(c.connect_error());
  Response res = c.request("POST", "/echo?a=1&b=2", "hello body", {{"X-Test", "Value 1"}});
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[http::field::content_type], "application/json");
  EXPECT_EQ(res["X-Handler"], "echo");
  auto j = nlohmann::json::parse(res.body());
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/echo");
  EXPECT_EQ(j["query"], "a=1&b=2");
  EXPECT_EQ(j["body"], "hello body");
  EXPECT_EQ(j["x_test"], "Value 1");  // looked up as "x-test"
  EXPECT_EQ(j["remote_ip"], "127.0.0.1");
  EXPECT_EQ(j["remote_port"], c.local_port());
}

TEST(HttpServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  auto server = start_server();
  TestClient c(server->port());
  Response missing = c.request("GET", "/nope");
  ASSERT_EQ(missing.result_int(), 404);
  EXPECT_EQ(error_of(missing)["code"], 404);
  EXPECT_EQ(error_of(missing)["type"], "NotFoundError");
  EXPECT_TRUE(error_of(missing)["param"].is_null());

  Response wrong = c.request("DELETE", "/echo");  // same connection: errors keep it alive
  ASSERT_EQ(wrong.result_int(), 405);
  EXPECT_EQ(wrong[http::field::allow], "GET, POST");
  EXPECT_EQ(error_of(wrong)["code"], 405);
}

TEST(HttpServerTest, TemplateRoutesPassTheirPlaceholders) {
  auto params = [](const HttpRequest& req, std::shared_ptr<Responder> r) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : req.path_params) j[k] = v;
    r->respond(200, "application/json", j.dump());
  };
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/items/{id}", params);
    s.route("POST", "/items/{id}/cancel", params);
    s.route("GET", "/models/{name*}", params);
    s.route("GET", "/items/fixed", echo_handler);
  });
  TestClient c(server->port());
  Response one = c.request("GET", "/items/resp_1");
  ASSERT_EQ(one.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(one.body())["id"], "resp_1");
  Response cancel = c.request("POST", "/items/a%20b/cancel");
  ASSERT_EQ(cancel.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(cancel.body())["id"], "a b");
  // A trailing {name*} takes the rest of the path, slashes included, percent-decoded.
  Response rest = c.request("GET", "/models/org/Model%2Dv1/x.gguf?q=1");
  ASSERT_EQ(rest.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(rest.body())["name"], "org/Model-v1/x.gguf");
  Response absolute = c.request("GET", "/models//abs/x.gguf");  // a name that is a path
  EXPECT_EQ(nlohmann::json::parse(absolute.body())["name"], "/abs/x.gguf");
  // Exact paths win; templates match whole segments only.
  EXPECT_EQ(nlohmann::json::parse(c.request("GET", "/items/fixed").body())["path"], "/items/fixed");
  EXPECT_EQ(c.request("GET", "/items/a/b").result_int(), 404);
  EXPECT_EQ(c.request("GET", "/items").result_int(), 404);
  EXPECT_EQ(c.request("GET", "/models").result_int(), 404);
  Response wrong = c.request("DELETE", "/items/x/cancel");
  EXPECT_EQ(wrong.result_int(), 405);
  EXPECT_EQ(wrong[http::field::allow], "POST");
}

TEST(HttpServerTest, BodyOverLimitIs413) {
  HttpServerOptions o = test_options();
  o.max_body_bytes = 1024;
  auto server = start_server(o);
  {
    TestClient c(server->port());
    Response res = c.request("POST", "/echo", std::string(1024, 'a'));
    ASSERT_EQ(res.result_int(), 200);
    EXPECT_EQ(nlohmann::json::parse(res.body())["body"].get<std::string>().size(), 1024u);
  }
  TestClient c(server->port());
  Response res = c.request("POST", "/echo", std::string(1025, 'a'));
  ASSERT_EQ(res.result_int(), 413);
  EXPECT_EQ(error_of(res)["code"], 413);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  auto server = start_server();
  TestClient c(server->port());
  Response first = c.request("GET", "/echo?n=1");
  Response second = c.request("GET", "/echo?n=2");
  ASSERT_EQ(first.result_int(), 200);
  ASSERT_EQ(second.result_int(), 200);
  EXPECT_TRUE(first.keep_alive());
  EXPECT_EQ(nlohmann::json::parse(second.body())["query"], "n=2");
  EXPECT_EQ(nlohmann::json::parse(first.body())["remote_port"],
            nlohmann::json::parse(second.body())["remote_port"]);
  EXPECT_EQ(server->connection_count(), 1u);
}

TEST(HttpServerTest, ResponseFromAnotherThreadLater) {
  std::promise<std::shared_ptr<Responder>> got;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/later",
            [&](const HttpRequest&, std::shared_ptr<Responder> r) { got.set_value(std::move(r)); });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("GET", "/later"));
  auto future = got.get_future();
  auto r = get_within(future);
  EXPECT_TRUE(r->is_open());
  std::thread([r] { EXPECT_TRUE(r->respond(201, "text/plain", "made")); }).join();
  Response res = c.read_response();
  EXPECT_EQ(res.result_int(), 201);
  EXPECT_EQ(res.body(), "made");
  EXPECT_FALSE(r->respond(200, "text/plain", "twice"));
  EXPECT_EQ(c.request("GET", "/echo").result_int(), 200);  // nothing stray on the wire
  EXPECT_FALSE(r->is_open());
}

TEST(HttpServerTest, StreamFromAnotherThreadArrivesChunkByChunkInOrder) {
  std::promise<std::shared_ptr<Responder>> got;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("POST", "/stream", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      EXPECT_TRUE(r->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
      got.set_value(std::move(r));
    });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("POST", "/stream", "{}"));
  auto future = got.get_future();
  auto r = get_within(future);

  constexpr int kEvents = 4;
  std::vector<std::string> expected;
  for (int i = 0; i < kEvents; ++i) expected.push_back(sse_data(fmt::format("{{\"i\":{}}}", i)));
  expected.emplace_back(kSseDone);
  // Each event is sent only after the client has received the previous one, so the test fails
  // if the server holds chunks back.
  std::vector<std::promise<void>> acks(kEvents);
  std::thread producer([&] {
    for (int i = 0; i < kEvents; ++i) {
      r->send_chunk(expected[i]);
      auto ack = acks[i].get_future();
      if (ack.wait_for(kWait) != std::future_status::ready) return;
    }
    r->send_chunk(std::string(kSseDone));
    r->end_stream();
  });

  http::response_parser<http::string_body> parser;
  std::vector<std::string> chunks;
  std::string partial;
  auto on_body = [&](std::uint64_t remain, boost::beast::string_view body,
                     boost::system::error_code&) -> std::size_t {
    partial.append(body.data(), body.size());
    if (remain == body.size()) chunks.push_back(std::exchange(partial, {}));
    return body.size();
  };
  parser.on_chunk_body(on_body);
  ASSERT_FALSE(c.read_header(parser));
  EXPECT_EQ(parser.get().result_int(), 200);
  EXPECT_EQ(parser.get()[http::field::content_type], "text/event-stream");
  EXPECT_EQ(parser.get()["Cache-Control"], "no-cache");
  EXPECT_TRUE(parser.chunked());
  for (int i = 0; i < kEvents; ++i) {
    while (chunks.size() < static_cast<size_t>(i + 1) && !parser.is_done()) {
      ASSERT_FALSE(c.read_some(parser));
    }
    acks[i].set_value();
  }
  while (!parser.is_done()) ASSERT_FALSE(c.read_some(parser));
  producer.join();
  EXPECT_EQ(chunks, expected);

  // The chunked stream ended cleanly, so the connection carries the next request.
  EXPECT_EQ(c.request("GET", "/echo").result_int(), 200);
  EXPECT_EQ(server->connection_count(), 1u);
  EXPECT_FALSE(r->is_open());  // completed (checked after the next exchange: no race)
}

TEST(HttpServerTest, Http10StreamIsDelimitedByClose) {
  std::thread producer;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/stream", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      r->start_stream(200);
      producer = std::thread([r] {
        r->send_chunk("one ");
        r->send_chunk("two");
        r->end_stream();
      });
    });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("GET", "/stream", "", {}, 10));
  Response res = c.read_response();
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "one two");
  EXPECT_FALSE(res.chunked());
  EXPECT_TRUE(c.wait_closed());
  producer.join();
}

TEST(HttpServerTest, ClientLeavingMidStreamFiresOnDisconnectOnce) {
  std::promise<std::shared_ptr<Responder>> got;
  std::atomic<int> fired{0};
  std::promise<void> fired_once;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/stream", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      r->on_disconnect([&] {
        if (fired.fetch_add(1) == 0) fired_once.set_value();
      });
      r->start_stream(200);
      r->send_chunk(sse_data("first"));
      got.set_value(std::move(r));
    });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("GET", "/stream"));
  auto future = got.get_future();
  auto r = get_within(future);
  http::response_parser<http::string_body> parser;
  ASSERT_FALSE(c.read_header(parser));
  c.close();

  auto fired_future = fired_once.get_future();
  ASSERT_EQ(fired_future.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(r->is_open());
  for (int i = 0; i < 100; ++i) r->send_chunk(sse_data("late"));  // harmless no-ops
  r->end_stream();
  // A callback registered after the fact runs at once; the first one is not run again.
  bool late_ran = false;
  r->on_disconnect([&] { late_ran = true; });
  EXPECT_TRUE(late_ran);
  server->shutdown(1s);
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(server->connection_count(), 0u);
}

TEST(HttpServerTest, ClientLeavingWhileHandlerComputesFiresOnDisconnect) {
  std::promise<std::shared_ptr<Responder>> got;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("POST", "/slow",
            [&](const HttpRequest&, std::shared_ptr<Responder> r) { got.set_value(std::move(r)); });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("POST", "/slow", "{\"prompt\":\"hi\"}"));
  auto future = got.get_future();
  auto r = get_within(future);
  std::promise<void> fired;
  r->on_disconnect([&] { fired.set_value(); });
  EXPECT_TRUE(r->is_open());
  c.close();
  auto fired_future = fired.get_future();
  ASSERT_EQ(fired_future.wait_for(kWait), std::future_status::ready);
  EXPECT_FALSE(r->is_open());
  EXPECT_FALSE(r->respond(200, "text/plain", "too late"));
}

TEST(HttpServerTest, HandlerExceptionIsGeneric500) {
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/boom", [](const HttpRequest&, std::shared_ptr<Responder>) {
      throw std::runtime_error("secret internal detail");
    });
  });
  TestClient c(server->port());
  Response res = c.request("GET", "/boom");
  ASSERT_EQ(res.result_int(), 500);
  EXPECT_EQ(nlohmann::json::parse(res.body()),
            nlohmann::json::parse(R"({"error":{"message":"Internal server error",)"
                                  R"("type":"InternalServerError","param":null,"code":500}})"));
  EXPECT_EQ(res.body().find("secret"), std::string::npos);
  EXPECT_EQ(c.request("GET", "/echo").result_int(), 200);
}

TEST(HttpServerTest, ExceptionAfterStreamStartCutsTheStream) {
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/boom", [](const HttpRequest&, std::shared_ptr<Responder> r) {
      r->start_stream(200);
      r->send_chunk("partial");
      throw std::runtime_error("engine failed");
    });
  });
  TestClient c(server->port());
  boost::system::error_code ec;
  ASSERT_FALSE(c.send("GET", "/boom"));
  Response res = c.read_response(&ec);
  EXPECT_TRUE(ec);  // the chunked body never ends
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, GracefulShutdownFinishesInFlightAndRefusesNewConnections) {
  std::promise<std::shared_ptr<Responder>> got;
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("POST", "/slow",
            [&](const HttpRequest&, std::shared_ptr<Responder> r) { got.set_value(std::move(r)); });
  });
  TestClient idle(server->port());
  ASSERT_EQ(idle.request("GET", "/echo").result_int(), 200);
  TestClient busy(server->port());
  ASSERT_FALSE(busy.send("POST", "/slow"));
  auto future = got.get_future();
  auto r = get_within(future);
  bool disconnected = false;
  r->on_disconnect([&] { disconnected = true; });

  server->stop_accepting();
  TestClient refused(server->port());
  EXPECT_EQ(refused.connect_error(), boost::asio::error::connection_refused);

  auto start = std::chrono::steady_clock::now();
  std::thread stopper([&] { server->shutdown(10s); });
  // Shutdown closes idle keep-alive connections first; once that is seen it is under way.
  EXPECT_TRUE(idle.wait_closed());
  EXPECT_TRUE(r->respond(200, "text/plain", "finished"));
  Response res = busy.read_response();
  stopper.join();
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "finished");
  EXPECT_FALSE(res.keep_alive());  // answered during shutdown
  EXPECT_TRUE(busy.wait_closed());
  EXPECT_FALSE(disconnected);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // did not wait out the grace
}

TEST(HttpServerTest, ShutdownClosesStuckStreamAfterGrace) {
  std::promise<std::shared_ptr<Responder>> got;
  std::atomic<int> fired{0};
  auto server = start_server(test_options(), [&](HttpServer& s) {
    s.route("GET", "/stream", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      r->on_disconnect([&] { fired.fetch_add(1); });
      r->start_stream(200);
      r->send_chunk(sse_data("stuck"));
      got.set_value(std::move(r));
    });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("GET", "/stream"));
  auto future = got.get_future();
  auto r = get_within(future);
  http::response_parser<http::string_body> parser;
  ASSERT_FALSE(c.read_header(parser));

  auto start = std::chrono::steady_clock::now();
  server->shutdown(200ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_EQ(fired.load(), 1);
  EXPECT_FALSE(r->is_open());
  r->send_chunk("after shutdown");  // no-op, no crash
  r->end_stream();
  EXPECT_TRUE(c.wait_closed());
  EXPECT_FALSE(parser.is_done());
}

TEST(HttpServerTest, TwoHundredIdleConnectionsOnTwoIoThreads) {
  constexpr size_t kConnections = 200;
  HttpServer* server_ptr = nullptr;
  std::mutex mu;
  std::set<std::thread::id> io_threads;
  HttpServerOptions o = test_options();
  o.io_threads = 2;
  auto server = start_server(o, [&](HttpServer& s) {
    s.route("GET", "/count", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      {
        std::lock_guard lock(mu);
        io_threads.insert(std::this_thread::get_id());
      }
      r->respond(200, "text/plain", std::to_string(server_ptr->connection_count()));
    });
  });
  server_ptr = server.get();
  std::vector<std::unique_ptr<TestClient>> clients;
  for (size_t i = 0; i < kConnections; ++i) {
    clients.push_back(std::make_unique<TestClient>(server->port()));
    ASSERT_FALSE(clients.back()->connect_error());
  }
  // Connections are accepted in order, so by the time the last one is served all are open.
  Response last = clients.back()->request("GET", "/count");
  ASSERT_EQ(last.result_int(), 200);
  EXPECT_EQ(last.body(), std::to_string(kConnections));
  for (auto& c : clients) EXPECT_EQ(c->request("GET", "/count").result_int(), 200);
  EXPECT_EQ(server->connection_count(), kConnections);
  EXPECT_LE(io_threads.size(), 2u);
}

TEST(HttpServerTest, IdleKeepAliveConnectionIsClosedAfterTimeout) {
  HttpServerOptions o = test_options();
  o.keep_alive_timeout = 100ms;
  auto server = start_server(o);
  TestClient c(server->port());
  ASSERT_EQ(c.request("GET", "/echo").result_int(), 200);
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, SlowRequestHeadIsCutOff) {
  HttpServerOptions o = test_options();
  o.header_timeout = 100ms;
  auto server = start_server(o);
  TestClient c(server->port());
  ASSERT_FALSE(c.write_raw("GET /echo HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, ConnectionsOverTheCapGet503) {
  HttpServerOptions o = test_options();
  o.max_connections = 2;
  auto server = start_server(o);
  TestClient a(server->port());
  TestClient b(server->port());
  ASSERT_EQ(a.request("GET", "/echo").result_int(), 200);
  ASSERT_EQ(b.request("GET", "/echo").result_int(), 200);
  TestClient over(server->port());
  Response res = over.read_response();
  ASSERT_EQ(res.result_int(), 503);
  EXPECT_EQ(error_of(res)["code"], 503);
  EXPECT_TRUE(over.wait_closed());
  EXPECT_EQ(a.request("GET", "/echo").result_int(), 200);
}

TEST(HttpServerTest, Expect100ContinueGetsInterimResponse) {
  auto server = start_server();
  TestClient c(server->port());
  ASSERT_FALSE(c.write_raw(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(c.read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_FALSE(c.write_raw("hello"));
  Response res = c.read_response();
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(nlohmann::json::parse(res.body())["body"], "hello");
}

TEST(HttpServerTest, MalformedRequestIs400) {
  auto server = start_server();
  TestClient c(server->port());
  ASSERT_FALSE(c.write_raw("THIS IS NOT HTTP\r\n\r\n"));
  Response res = c.read_response();
  ASSERT_EQ(res.result_int(), 400);
  EXPECT_EQ(error_of(res)["type"], "BadRequestError");
  EXPECT_TRUE(c.wait_closed());
}

TEST(HttpServerTest, ClientThatStopsReadingIsCutOffAfterWriteTimeout) {
  HttpServerOptions o = test_options();
  o.write_timeout = 100ms;
  std::promise<void> fired;
  auto server = start_server(o, [&](HttpServer& s) {
    s.route("GET", "/flood", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
      r->on_disconnect([&] { fired.set_value(); });
      r->start_stream(200);
      // Far more than the kernel's socket buffers hold, so writes stall.
      for (int i = 0; i < 64; ++i) r->send_chunk(std::string(1 << 20, 'x'));
    });
  });
  TestClient c(server->port());
  ASSERT_FALSE(c.send("GET", "/flood"));  // and never read
  auto fired_future = fired.get_future();
  EXPECT_EQ(fired_future.wait_for(kWait), std::future_status::ready);
}

TEST(HttpServerTest, HeadResponseCarriesNoBody) {
  auto server = start_server();
  TestClient c(server->port());
  ASSERT_FALSE(c.write_raw("HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string head = c.read_until("\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 405 ", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: "), std::string::npos);
  // A body after that head would be read as the start of this response.
  Response next = c.request("GET", "/echo");
  EXPECT_EQ(next.result_int(), 200);
}

TEST(HttpServerTest, StartFailsOnPortInUse) {
  auto first = start_server();
  HttpServerOptions o = test_options();
  o.port = first->port();
  HttpServer second(o);
  Status st = second.start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(std::to_string(o.port)), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kestrel::server
