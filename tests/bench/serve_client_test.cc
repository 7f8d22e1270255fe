// The `bench serve` client against mock OpenAI servers (kestrel::server::HttpServer on port 0):
// chunk timing and usage, SSE events split across or packed into reads, the concurrency cap,
// every failure mode ending the request (not the run), and send times.
#include "bench/serve_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/http/http_server.h"

namespace kestrel::bench {
namespace {

using nlohmann::json;
using server::HttpRequest;
using server::Responder;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Runs callbacks after a delay on its own thread, so mock handlers can stream without blocking
// the server's I/O threads.
class Delayer {
 public:
  Delayer() : thread_([this] { ioc_.run(); }) {}
  ~Delayer() {
    work_.reset();
    thread_.join();
  }

  void after(milliseconds delay, std::function<void()> fn) {
    auto timer = std::make_shared<boost::asio::steady_timer>(ioc_, delay);
    timer->async_wait([timer, fn = std::move(fn)](boost::system::error_code) { fn(); });
  }

 private:
  boost::asio::io_context ioc_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      ioc_.get_executor()};
  std::thread thread_;
};

// One piece of a scripted stream: wait `delay` after the previous piece, then send `data`.
struct Piece {
  milliseconds delay;
  std::string data;
};

std::string event(const json& j) {
  return "data: " + j.dump() + "\n\n";
}
std::string text_chunk(const std::string& text) {
  return event({{"object", "text_completion"}, {"choices", {{{"index", 0}, {"text", text}}}}});
}
std::string delta_chunk(const json& delta) {
  return event(
      {{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", delta}}}}});
}
std::string usage_chunk(int completion_tokens) {
  return event({{"choices", json::array()},
                {"usage", {{"prompt_tokens", 3}, {"completion_tokens", completion_tokens}}}});
}
const std::string kDone = "data: [DONE]\n\n";

// Streams `pieces` one after another, then ends the stream.
void play(Delayer& delayer, std::shared_ptr<Responder> r, std::shared_ptr<std::vector<Piece>> p,
          size_t i = 0) {
  if (i == p->size()) {
    r->end_stream();
    return;
  }
  delayer.after((*p)[i].delay, [&delayer, r, p, i] {
    r->send_chunk((*p)[i].data);
    play(delayer, r, p, i + 1);
  });
}

struct MockServer {
  MockServer() : server(server::HttpServerOptions{.host = "127.0.0.1"}) {}
  ~MockServer() { server.shutdown(milliseconds(0)); }

  // Answers every request on `path` with the scripted stream.
  void stream(const std::string& path, std::vector<Piece> pieces) {
    auto script = std::make_shared<std::vector<Piece>>(std::move(pieces));
    server.route("POST", path,
                 [this, script](const HttpRequest& req, std::shared_ptr<Responder> r) {
                   record(req);
                   r->start_stream(200);
                   play(delayer, std::move(r), script);
                 });
  }

  void record(const HttpRequest& req) {
    std::lock_guard lock(mu);
    seen.push_back(req);
    arrivals.push_back(Clock::now());
  }

  ClientOptions client() {
    EXPECT_TRUE(server.start().ok());
    ClientOptions o;
    o.port = server.port();
    return o;
  }

  Delayer delayer;
  server::HttpServer server;
  std::mutex mu;
  std::vector<HttpRequest> seen;
  std::vector<Clock::time_point> arrivals;
};

ServeRequest completion(const std::string& id, double send_at = 0,
                        std::string endpoint = "/v1/completions") {
  return {
      std::move(endpoint), {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 7}}, 11, send_at, id};
}

TEST(ServeClient, TimesChunksAndReadsUsage) {
  MockServer mock;
  // An empty-text chunk first (not a token), one event split across two writes, two events in
  // one write, then usage that differs from the chunk count (it must win) and [DONE].
  const std::string split = text_chunk(" b");
  mock.stream("/v1/completions", {{milliseconds(0), text_chunk("")},
                                  {milliseconds(80), text_chunk("a")},
                                  {milliseconds(30), split.substr(0, 9)},
                                  {milliseconds(30), split.substr(9)},
                                  {milliseconds(30), text_chunk(" c")},
                                  {milliseconds(30), text_chunk(" d") + text_chunk(" e")},
                                  {milliseconds(10), usage_chunk(7) + kDone}});
  ClientOptions options = mock.client();
  options.api_key = "sk-test";
  std::vector<ServeRequest> requests = {completion("r0"), completion("r1"), completion("r2")};
  requests[1].body["stream_options"] = {{"continuous_usage_stats", false}};

  std::vector<size_t> progress;
  const auto traces =
      run_requests(options, requests, 0, [&](size_t done) { progress.push_back(done); });

  ASSERT_EQ(traces.size(), 3u);
  EXPECT_EQ(progress, (std::vector<size_t>{1, 2, 3}));
  for (const RequestTrace& t : traces) {
    EXPECT_TRUE(t.success) << t.error;
    EXPECT_EQ(t.prompt_len, 11);
    EXPECT_EQ(t.output_tokens, 7);
    EXPECT_GE(t.ttft_s, 0.080);
    ASSERT_EQ(t.itl_s.size(), 4u);
    EXPECT_GE(t.itl_s[0], 0.050);  // the split event completes with its second half
    EXPECT_GE(t.itl_s[1], 0.025);
    EXPECT_LT(t.itl_s[3], 0.025);  // packed with the previous event
    ASSERT_EQ(t.token_times_s.size(), 5u);
    EXPECT_NEAR(t.token_times_s[0], t.start_s + t.ttft_s, 1e-6);
    EXPECT_TRUE(std::is_sorted(t.token_times_s.begin(), t.token_times_s.end()));
    EXPECT_GE(t.latency_s, t.ttft_s + 0.125);  // 130 ms of pieces after the first token
  }
  ASSERT_EQ(mock.seen.size(), 3u);
  std::map<std::string, json> bodies;
  for (const HttpRequest& req : mock.seen) {
    EXPECT_EQ(req.header("authorization").value_or(""), "Bearer sk-test");
    bodies[std::string(req.header("x-request-id").value_or(""))] = json::parse(req.body);
  }
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_EQ(bodies["r0"]["stream"], true);
  EXPECT_EQ(bodies["r0"]["stream_options"]["include_usage"], true);
  EXPECT_EQ(bodies["r0"]["max_tokens"], 7);
  EXPECT_EQ(bodies["r1"]["stream_options"]["include_usage"], true);
  EXPECT_EQ(bodies["r1"]["stream_options"]["continuous_usage_stats"], false);
}

TEST(ServeClient, ChatDeltasAndStreamEndingWithoutDone) {
  MockServer mock;
  // The role chunk carries no content, so TTFT runs to the reasoning delta; the stream then
  // simply ends (no [DONE]) and no usage is sent, so content chunks are counted.
  mock.stream(
      "/v1/chat/completions",
      {{milliseconds(0), delta_chunk({{"role", "assistant"}, {"content", ""}})},
       {milliseconds(60), delta_chunk({{"reasoning", "hmm"}})},
       {milliseconds(20), delta_chunk({{"content", "Hi"}})},
       {milliseconds(20), delta_chunk({{"content", "!"}})},
       {milliseconds(5),
        event({{"choices",
                {{{"index", 0}, {"delta", json::object()}, {"finish_reason", "stop"}}}}})}});
  const auto traces = run_requests(mock.client(), {completion("c", 0, "/v1/chat/completions")}, 1);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_TRUE(traces[0].success) << traces[0].error;
  EXPECT_GE(traces[0].ttft_s, 0.060);
  EXPECT_EQ(traces[0].itl_s.size(), 2u);
  EXPECT_EQ(traces[0].output_tokens, 3);
}

TEST(ServeClient, NeverExceedsMaxConcurrency) {
  MockServer mock;
  std::atomic<int> active{0};
  std::atomic<int> peak{0};
  mock.server.route("POST", "/v1/completions",
                    [&](const HttpRequest&, std::shared_ptr<Responder> r) {
                      int now = ++active;
                      int seen = peak.load();
                      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
                      }
                      r->start_stream(200);
                      mock.delayer.after(milliseconds(100), [&active, r] {
                        --active;  // before [DONE]: the client frees the slot once it sees it
                        r->send_chunk(text_chunk("x") + text_chunk("y") + usage_chunk(2) + kDone);
                        r->end_stream();
                      });
                    });
  std::vector<ServeRequest> requests;
  for (int i = 0; i < 300; ++i) requests.push_back(completion(std::to_string(i)));
  size_t last_progress = 0;
  const auto traces =
      run_requests(mock.client(), requests, 50, [&](size_t done) { last_progress = done; });
  ASSERT_EQ(traces.size(), 300u);
  for (const RequestTrace& t : traces) {
    ASSERT_TRUE(t.success) << t.error;
    EXPECT_EQ(t.output_tokens, 2);
  }
  EXPECT_EQ(last_progress, 300u);
  EXPECT_LE(peak.load(), 50);
  EXPECT_GE(peak.load(), 40);  // the cap is used, not serialised
  // Six waves of 100 ms at least: a later request is timed from when it got its slot.
  const double last_start =
      std::max_element(traces.begin(), traces.end(), [](const auto& a, const auto& b) {
        return a.start_s < b.start_s;
      })->start_s;
  EXPECT_GE(last_start, 0.5);
}

TEST(ServeClient, FailuresEndTheRequestNotTheRun) {
  MockServer mock;
  auto reply = [&](const std::string& path, int status, std::string body) {
    mock.server.route("POST", path,
                      [status, body](const HttpRequest&, std::shared_ptr<Responder> r) {
                        r->respond(status, "application/json", body);
                      });
  };
  reply(
      "/e500", 500,
      R"({"error":{"message":"engine exploded","type":"InternalServerError","param":null,"code":500}})");
  reply(
      "/e400", 400,
      R"({"error":{"message":"max_tokens must be at least 1","type":"BadRequestError","param":null,"code":400}})");
  reply("/e401", 401, R"({"error":"Unauthorized"})");
  mock.stream(
      "/midstream",
      {{milliseconds(0), text_chunk("a")},
       {milliseconds(10),
        event({{"error",
                {{"message", "engine died"}, {"type", "InternalServerError"}, {"code", 500}}}}) +
            kDone}});
  mock.stream("/malformed",
              {{milliseconds(0), text_chunk("a")}, {milliseconds(0), "data: {not json\n\n"}});
  mock.stream("/empty", {{milliseconds(0), usage_chunk(0) + kDone}});
  std::mutex held_mu;
  std::vector<std::shared_ptr<Responder>> held;  // never answered
  mock.server.route("POST", "/hang", [&](const HttpRequest&, std::shared_ptr<Responder> r) {
    std::lock_guard lock(held_mu);
    held.push_back(std::move(r));
  });
  ClientOptions options = mock.client();
  options.request_timeout = std::chrono::seconds(1);
  std::vector<ServeRequest> requests = {completion("a", 0, "/e500"),
                                        completion("b", 0, "/e400"),
                                        completion("c", 0, "/e401"),
                                        completion("d", 0, "/midstream"),
                                        completion("e", 0, "/malformed"),
                                        completion("f", 0, "/empty"),
                                        completion("g", 0, "/hang"),
                                        completion("h", 0, "/nowhere"),
                                        completion("i")};
  requests.back().body = json::array({1, 2});

  const auto start = Clock::now();
  const auto traces = run_requests(options, requests, 0);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(took, 3.0);
  ASSERT_EQ(traces.size(), requests.size());
  const std::vector<std::string> expected = {"HTTP 500: engine exploded",
                                             "HTTP 400: max_tokens must be at least 1",
                                             "HTTP 401: Unauthorized",
                                             "error in stream: engine died",
                                             "malformed stream event: {not json",
                                             "the stream ended without any content chunk",
                                             "request timed out after 1 s",
                                             "HTTP 404: ",
                                             "request body must be a JSON object"};
  for (size_t i = 0; i < traces.size(); ++i) {
    EXPECT_FALSE(traces[i].success) << i;
    EXPECT_EQ(traces[i].error.substr(0, expected[i].size()), expected[i]) << traces[i].error;
    EXPECT_EQ(traces[i].prompt_len, 11);
  }
  EXPECT_GE(traces[6].latency_s, 0.99);

  // A closed port: refused at once.
  uint16_t closed_port;
  {
    server::HttpServer gone(server::HttpServerOptions{.host = "127.0.0.1"});
    ASSERT_TRUE(gone.start().ok());
    closed_port = gone.port();
    gone.shutdown(milliseconds(0));
  }
  ClientOptions refused;
  refused.port = closed_port;
  const auto refused_traces = run_requests(refused, {completion("x"), completion("y")}, 1);
  ASSERT_EQ(refused_traces.size(), 2u);
  for (const RequestTrace& t : refused_traces) {
    EXPECT_FALSE(t.success);
    EXPECT_NE(t.error.find("cannot connect to 127.0.0.1:" + std::to_string(closed_port)),
              std::string::npos)
        << t.error;
  }
}

TEST(ServeClient, RespectsSendTimes) {
  MockServer mock;
  mock.stream("/v1/completions", {{milliseconds(0), text_chunk("a") + usage_chunk(1) + kDone}});
  // Input order differs from send order; traces stay in input order.
  const auto traces =
      run_requests(mock.client(), {completion("late", 0.3), completion("early", 0.0)}, 0);
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_TRUE(traces[0].success) << traces[0].error;
  EXPECT_TRUE(traces[1].success) << traces[1].error;
  EXPECT_GE(traces[0].start_s, 0.3);
  EXPECT_LT(traces[1].start_s, 0.1);
  ASSERT_EQ(mock.seen.size(), 2u);
  EXPECT_EQ(mock.seen[0].header("x-request-id").value_or(""), "early");
  EXPECT_EQ(mock.seen[1].header("x-request-id").value_or(""), "late");
  EXPECT_GE(std::chrono::duration<double>(mock.arrivals[1] - mock.arrivals[0]).count(), 0.25);
}

}  // namespace
}  // namespace kestrel::bench
