// `kestrel proxy` over real sockets against fake prefill and decode instances (HTTP servers in
// this process that answer as Kestrel's do): what each instance is sent, passthrough of streamed
// and whole responses with the prefill's cached tokens, retries before the first byte, a decode
// stage that fails starting over, the recompute continuation, a client that goes away, and the
// management routes.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "proxy/proxy_server.h"
#include "server/http/http_server.h"
#include "server/http/sse.h"
#include "server/http_test_client.h"

namespace kestrel::proxy {
namespace {

using json = nlohmann::json;
using server::HttpRequest;
using server::Responder;
using server::testing::TestClient;

struct Seen {
  std::string path, request_id, authorization;
  json body;
};

// One fake instance: every POST to the OpenAI routes is recorded and answered by `handler`.
class FakeInstance {
 public:
  using Handler = std::function<void(const Seen&, std::shared_ptr<Responder>, int call)>;
  explicit FakeInstance(Handler handler) : handler_(std::move(handler)) {
    server::HttpServerOptions o;
    o.host = "127.0.0.1";
    http_ = std::make_unique<server::HttpServer>(o);
    for (const char* path : {"/v1/completions", "/v1/chat/completions"})
      http_->route("POST", path, [this](const HttpRequest& r, std::shared_ptr<Responder> out) {
        Seen s;
        s.path = r.path;
        s.request_id = std::string(r.header("x-request-id").value_or(""));
        s.authorization = std::string(r.header("authorization").value_or(""));
        s.body = json::parse(r.body, nullptr, false);
        int call;
        {
          std::lock_guard lock(mu_);
          seen_.push_back(s);
          call = int(seen_.size());
        }
        handler_(s, std::move(out), call);
      });
    http_->route("GET", "/health", [](const HttpRequest&, std::shared_ptr<Responder> out) {
      out->respond(200, "text/plain", "");
    });
    http_->route("GET", "/v1/models", [](const HttpRequest&, std::shared_ptr<Responder> out) {
      out->respond(200, "application/json", R"({"object":"list","data":[{"id":"fake"}]})");
    });
    http_->route("POST", "/reset_prefix_cache",
                 [](const HttpRequest&, std::shared_ptr<Responder> out) {
                   out->respond(200, "text/plain", "");
                 });
    EXPECT_TRUE(http_->start().ok());
  }
  ~FakeInstance() { http_->shutdown(std::chrono::milliseconds(500)); }
  uint16_t port() const { return http_->port(); }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  Handler handler_;
  std::unique_ptr<server::HttpServer> http_;
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
};

// A prefill instance's answer, with the params a decode needs and 3 cached prompt tokens.
void answer_prefill(const Seen& s, Responder& out) {
  const int64_t prompt = int64_t(s.body.value("prompt", std::string()).size());
  json r = {{"id", "cmpl-p"},
            {"object", "text_completion"},
            {"choices", json::array({{{"index", 0}, {"text", "P"}, {"finish_reason", "length"}}})},
            {"usage",
             {{"prompt_tokens", prompt},
              {"completion_tokens", 1},
              {"total_tokens", prompt + 1},
              {"prompt_tokens_details", {{"cached_tokens", 3}}}}},
            {"kv_transfer_params",
             {{"do_remote_prefill", true},
              {"do_remote_decode", false},
              {"remote_host", "127.0.0.1"},
              {"remote_port", 1},
              {"remote_block_ids", json::array({json::array({1, 2})})},
              {"remote_request_id", s.request_id}}}};
  out.respond(200, "application/json", r.dump());
}

// A decode instance's answer of `pieces`, a token each (streamed as the request asks; the
// stop_reason given to the last choice). One empty piece stands for no token at all.
void answer_decode(const Seen& s, Responder& out, const std::vector<std::string>& pieces,
                   const json& stop_reason = nullptr, const std::string& id = "cmpl-d") {
  const int64_t prompt = int64_t(s.body.value("prompt", std::string()).size());
  const bool none = pieces.size() == 1 && pieces[0].empty();
  const int64_t tokens = none ? 0 : int64_t(pieces.size());
  const json usage = {{"prompt_tokens", prompt},
                      {"completion_tokens", tokens},
                      {"total_tokens", prompt + tokens},
                      {"prompt_tokens_details", {{"cached_tokens", 0}}}};
  const std::string reason = stop_reason.is_null() ? "length" : "stop";
  if (!s.body.value("stream", false)) {
    std::string text;
    for (const auto& p : pieces) text += p;
    json r = {{"id", id},
              {"object", "text_completion"},
              {"choices", json::array({{{"index", 0},
                                        {"text", text},
                                        {"finish_reason", reason},
                                        {"stop_reason", stop_reason}}})},
              {"usage", usage}};
    out.respond(200, "application/json", r.dump());
    return;
  }
  out.start_stream(200);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool last = i + 1 == pieces.size();
    json choice = {{"index", 0}, {"text", pieces[i]}, {"finish_reason", nullptr}};
    if (last) {
      choice["finish_reason"] = reason;
      choice["stop_reason"] = stop_reason;
    }
    out.send_chunk(server::sse_data(
        json{{"id", id}, {"object", "text_completion"}, {"choices", json::array({choice})}}
            .dump()));
  }
  if (s.body.contains("stream_options") && s.body["stream_options"].value("include_usage", false))
    out.send_chunk(
        server::sse_data(json{{"id", id}, {"choices", json::array()}, {"usage", usage}}.dump()));
  out.send_chunk(std::string(server::kSseDone));
  out.end_stream();
}

ProxyOptions options_for(const std::vector<const FakeInstance*>& prefill,
                         const std::vector<const FakeInstance*>& decode,
                         std::vector<int> extra_prefill_ports = {}) {
  ProxyOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.prefiller_hosts.clear();
  o.prefiller_ports.clear();
  o.decoder_hosts.clear();
  o.decoder_ports.clear();
  for (int p : extra_prefill_ports) {
    o.prefiller_hosts.push_back("127.0.0.1");
    o.prefiller_ports.push_back(p);
  }
  for (const FakeInstance* f : prefill) {
    o.prefiller_hosts.push_back("127.0.0.1");
    o.prefiller_ports.push_back(f->port());
  }
  for (const FakeInstance* f : decode) {
    o.decoder_hosts.push_back("127.0.0.1");
    o.decoder_ports.push_back(f->port());
  }
  o.waiting_retry_interval = 0.05;
  o.workers = 2;
  return o;
}

server::testing::Response post(uint16_t port, const std::string& path, const json& body,
                               std::vector<std::pair<std::string, std::string>> headers = {}) {
  TestClient c(port, std::chrono::seconds(10));
  headers.emplace_back("Content-Type", "application/json");
  return c.request("POST", path, body.dump(), headers);
}

json body_of(const server::testing::Response& r) {
  return json::parse(r.body(), nullptr, false);
}

// The SSE payloads of a streamed body, [DONE] included.
std::vector<std::string> events_of(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

TEST(ProxyFlow, PrefillThenDecodeWithTheSameIdAndTheParams) {
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int) {
    answer_decode(s, *out, {"Hel", "lo"});
  });
  ProxyServer proxy(options_for({&p}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  const json request = {{"prompt", "abcdef"}, {"max_tokens", 5}, {"temperature", 0}};
  const auto r = post(proxy.port(), "/v1/completions", request,
                      {{"Authorization", "Bearer secret"}, {"X-Request-Id", "req-7"}});
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const json answer = body_of(r);
  EXPECT_EQ(answer["choices"][0]["text"], "Hello");
  EXPECT_EQ(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 3);  // the prefill's
  EXPECT_EQ(answer["usage"]["completion_tokens"], 2);

  const auto ps = p.seen();
  const auto ds = d.seen();
  ASSERT_EQ(ps.size(), 1u);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ps[0].request_id, "req-7");
  EXPECT_EQ(ds[0].request_id, "req-7");
  EXPECT_EQ(ps[0].authorization, "Bearer secret");
  EXPECT_EQ(ds[0].authorization, "Bearer secret");
  EXPECT_EQ(ps[0].body["max_tokens"], 1);
  EXPECT_EQ(ps[0].body["stream"], false);
  EXPECT_EQ(ps[0].body["kv_transfer_params"]["do_remote_decode"], true);
  EXPECT_EQ(ds[0].body["max_tokens"], 5);
  EXPECT_EQ(ds[0].body["kv_transfer_params"]["do_remote_prefill"], true);
  EXPECT_EQ(ds[0].body["kv_transfer_params"]["remote_request_id"], "req-7");
  EXPECT_EQ(ds[0].body["temperature"], 0);
  proxy.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, StreamsPassThroughWithUsageOnlyWhenAsked) {
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int) {
    answer_decode(s, *out, {"a", "b", "c"});
  });
  ProxyServer proxy(options_for({&p}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  const json plain = {{"prompt", "xyz"}, {"max_tokens", 3}, {"stream", true}};
  const auto r = post(proxy.port(), "/v1/completions", plain);
  ASSERT_EQ(r.result_int(), 200);
  EXPECT_EQ(r[boost::beast::http::field::content_type], "text/event-stream");
  auto events = events_of(r.body());
  ASSERT_EQ(events.size(), 4u) << r.body();  // three chunks, no usage chunk, [DONE]
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "abc");
  EXPECT_EQ(events.back(), "[DONE]");
  // The decode was asked for usage anyway (the proxy counts a recomputed decode's tokens).
  EXPECT_EQ(d.seen()[0].body["stream_options"]["include_usage"], true);

  json with_usage = plain;
  with_usage["stream_options"] = {{"include_usage", true}};
  events = events_of(post(proxy.port(), "/v1/completions", with_usage).body());
  ASSERT_EQ(events.size(), 5u);
  const json usage = json::parse(events[3])["usage"];
  EXPECT_EQ(usage["completion_tokens"], 3);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 3);
  proxy.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, APrefillFailureIsRetriedElsewhereAndA400IsNot) {
  FakeInstance bad([](const Seen&, std::shared_ptr<Responder> out, int) {
    out->respond(503, "application/json", R"({"error":{"message":"busy","code":503}})");
  });
  FakeInstance good(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_decode(s, *out, {"ok"}); });
  ProxyServer proxy(options_for({&bad, &good}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  for (int i = 0; i < 3; ++i) {
    const auto r = post(proxy.port(), "/v1/completions", {{"prompt", "q"}, {"max_tokens", 1}});
    EXPECT_EQ(r.result_int(), 200) << r.body();
  }
  EXPECT_EQ(good.seen().size(), 3u);
  proxy.stop(std::chrono::seconds(1));

  FakeInstance refuses([](const Seen&, std::shared_ptr<Responder> out, int) {
    out->respond(400, "application/json",
                 R"({"error":{"message":"prompt too long","type":"BadRequestError","code":400}})");
  });
  ProxyServer strict(options_for({&refuses}, {&d}));
  ASSERT_TRUE(strict.start().ok());
  const auto r = post(strict.port(), "/v1/completions", {{"prompt", "q"}});
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(body_of(r)["error"]["message"], "prompt too long");
  EXPECT_EQ(refuses.seen().size(), 1u);
  EXPECT_EQ(d.seen().size(), 3u);  // only the first proxy's requests
  strict.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, AnUnreachableInstanceIsSkippedAndGivingUpIsA502) {
  int closed_port;
  {
    server::HttpServerOptions o;
    o.host = "127.0.0.1";
    server::HttpServer s(o);
    ASSERT_TRUE(s.start().ok());
    closed_port = s.port();
    s.shutdown(std::chrono::milliseconds(0));
  }
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_decode(s, *out, {"ok"}); });
  ProxyServer proxy(options_for({&p}, {&d}, {closed_port}));
  ASSERT_TRUE(proxy.start().ok());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(post(proxy.port(), "/v1/completions", {{"prompt", "q"}}).result_int(), 200);
  EXPECT_EQ(p.seen().size(), 4u);
  proxy.stop(std::chrono::seconds(1));

  // Nothing answers: max_retries attempts, then a 502 that says why.
  ProxyOptions dead = options_for({}, {&d}, {closed_port});
  dead.max_retries = 2;
  ProxyServer hopeless(dead);
  ASSERT_TRUE(hopeless.start().ok());
  const auto r = post(hopeless.port(), "/v1/completions", {{"prompt", "q"}});
  EXPECT_EQ(r.result_int(), 502);
  const std::string message = body_of(r)["error"]["message"];
  EXPECT_NE(message.find(std::to_string(closed_port)), std::string::npos) << message;
  EXPECT_NE(message.find("after 2 attempts"), std::string::npos) << message;
  hopeless.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, AFailedDecodeStartsOverWithANewPrefill) {
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int call) {
    if (call == 1) {
      out->respond(503, "application/json", R"({"error":{"message":"KV full","code":503}})");
      return;
    }
    answer_decode(s, *out, {"fine"});
  });
  ProxyServer proxy(options_for({&p}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  const auto r = post(proxy.port(), "/v1/completions", {{"prompt", "q"}, {"stream", true}});
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(json::parse(events_of(r.body())[0])["choices"][0]["text"], "fine");
  EXPECT_EQ(p.seen().size(), 2u);
  EXPECT_EQ(d.seen().size(), 2u);
  proxy.stop(std::chrono::seconds(1));
}

// A decode that gives the request back after "Hello": the proxy prefills "q" + "Hello" and
// decodes the rest; the client sees one answer.
TEST(ProxyFlow, ARecomputedDecodeIsContinued) {
  for (bool stream : {false, true}) {
    FakeInstance p(
        [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
    FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int call) {
      if (call == 1) {
        answer_decode(s, *out, {"Hel", "lo"}, "recomputed", "cmpl-first");
        return;
      }
      answer_decode(s, *out, {" wor", "ld"}, nullptr, "cmpl-second");
    });
    ProxyServer proxy(options_for({&p}, {&d}));
    ASSERT_TRUE(proxy.start().ok());
    json request = {{"prompt", "q"}, {"max_tokens", 10}, {"stream", stream}};
    if (stream) request["stream_options"] = {{"include_usage", true}};
    const auto r = post(proxy.port(), "/v1/completions", request);
    ASSERT_EQ(r.result_int(), 200) << r.body();
    std::string text;
    json usage;
    if (stream) {
      const auto events = events_of(r.body());
      EXPECT_EQ(std::count(events.begin(), events.end(), "[DONE]"), 1);
      for (const std::string& e : events) {
        if (e == "[DONE]") continue;
        const json j = json::parse(e);
        EXPECT_EQ(j["id"], "cmpl-first");
        if (j.contains("usage")) usage = j["usage"];
        if (j["choices"].empty()) continue;
        text += j["choices"][0]["text"].get<std::string>();
        EXPECT_NE(j["choices"][0].value("stop_reason", json()), "recomputed");
      }
    } else {
      const json answer = body_of(r);
      text = answer["choices"][0]["text"];
      usage = answer["usage"];
      EXPECT_EQ(answer["id"], "cmpl-first");
      EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
    }
    EXPECT_EQ(text, "Hello world") << stream;
    EXPECT_EQ(usage["completion_tokens"], 4);
    EXPECT_EQ(usage["prompt_tokens"], 1);  // the client's prompt, not the continuation's
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 3);
    const auto ps = p.seen();
    ASSERT_EQ(ps.size(), 2u);
    EXPECT_EQ(ps[1].body["prompt"], "qHello");
    EXPECT_NE(ps[1].request_id, ps[0].request_id);  // a new request
    const auto ds = d.seen();
    ASSERT_EQ(ds.size(), 2u);
    EXPECT_EQ(ds[1].body["max_tokens"], 8);
    EXPECT_EQ(ds[1].request_id, ps[1].request_id);
    proxy.stop(std::chrono::seconds(1));
  }
}

// A busy decode may give a request back many times: each pass that generated a token moves it
// on, so more such passes than --max-retries still finish it; passes without a token fail it
// after --max-retries.
TEST(ProxyFlow, RecomputesCountAgainstTheRetriesOnlyWithoutProgress) {
  for (bool stream : {false, true}) {
    FakeInstance p(
        [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
    FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int call) {
      if (call <= 6) {
        answer_decode(s, *out, {"x"}, "recomputed");
        return;
      }
      answer_decode(s, *out, {"y"});
    });
    ProxyOptions o = options_for({&p}, {&d});
    o.max_retries = 3;
    ProxyServer proxy(o);
    ASSERT_TRUE(proxy.start().ok());
    json request = {{"prompt", "q"}, {"max_tokens", 10}, {"stream", stream}};
    const auto r = post(proxy.port(), "/v1/completions", request);
    ASSERT_EQ(r.result_int(), 200) << r.body();
    std::string text;
    if (stream) {
      for (const std::string& e : events_of(r.body())) {
        if (e == "[DONE]") continue;
        const json j = json::parse(e);
        ASSERT_TRUE(j.contains("choices")) << e;
        if (!j["choices"].empty()) text += j["choices"][0]["text"].get<std::string>();
      }
    } else {
      text = body_of(r)["choices"][0]["text"];
    }
    EXPECT_EQ(text, "xxxxxxy") << stream;
    EXPECT_EQ(d.seen().size(), 7u);
    proxy.stop(std::chrono::seconds(1));
  }
  for (bool stream : {false, true}) {
    FakeInstance p(
        [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
    FakeInstance d([](const Seen& s, std::shared_ptr<Responder> out, int) {
      answer_decode(s, *out, {""}, "recomputed");
    });
    ProxyOptions o = options_for({&p}, {&d});
    o.max_retries = 3;
    ProxyServer proxy(o);
    ASSERT_TRUE(proxy.start().ok());
    const auto r = post(proxy.port(), "/v1/completions",
                        {{"prompt", "q"}, {"max_tokens", 10}, {"stream", stream}});
    EXPECT_EQ(d.seen().size(), 4u) << stream;  // the first pass and 3 retries
    const std::string body = r.body();
    EXPECT_NE(body.find("without generating a token"), std::string::npos) << body;
    if (!stream) {
      EXPECT_EQ(r.result_int(), 502) << body;
    }
    proxy.stop(std::chrono::seconds(1));
  }
}

TEST(ProxyFlow, AClientThatGoesAwayClosesTheDecodeExchange) {
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;
  std::vector<std::thread> threads;
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d([&](const Seen&, std::shared_ptr<Responder> out, int) {
    out->on_disconnect([&] {
      std::lock_guard lock(mu);
      gone = true;
      cv.notify_all();
    });
    out->start_stream(200);
    out->send_chunk(server::sse_data(
        R"({"id":"x","choices":[{"index":0,"text":"first","finish_reason":null}]})"));
    // ... and then nothing until the proxy hangs up.
  });
  ProxyServer proxy(options_for({&p}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  {
    TestClient c(proxy.port(), std::chrono::seconds(10));
    ASSERT_FALSE(c.send("POST", "/v1/completions", json{{"prompt", "q"}, {"stream", true}}.dump(),
                        {{"Content-Type", "application/json"}}));
    EXPECT_NE(c.read_until("first").find("first"), std::string::npos);
    c.close();
  }
  std::unique_lock lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return gone; }));
  lock.unlock();
  proxy.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, HealthModelsAndInstanceChanges) {
  FakeInstance p(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_prefill(s, *out); });
  FakeInstance d(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_decode(s, *out, {"a"}); });
  FakeInstance d2(
      [](const Seen& s, std::shared_ptr<Responder> out, int) { answer_decode(s, *out, {"b"}); });
  ProxyServer proxy(options_for({&p}, {&d}));
  ASSERT_TRUE(proxy.start().ok());
  auto health = [&] {
    TestClient c(proxy.port());
    return json::parse(c.request("GET", "/healthcheck").body());
  };
  EXPECT_EQ(
      health(),
      json::parse(R"({"status":"ok","prefill_instances":1,"decode_instances":1,"request_num":0})"));
  {
    TestClient c(proxy.port());
    const auto models = c.request("GET", "/v1/models");
    EXPECT_EQ(models.result_int(), 200);
    EXPECT_EQ(json::parse(models.body())["data"][0]["id"], "fake");
    EXPECT_EQ(c.request("POST", "/reset_prefix_cache").result_int(), 200);
  }
  const std::string d2_address = "127.0.0.1:" + std::to_string(d2.port());
  auto added = post(proxy.port(), "/instances/add",
                    {{"type", "decode"}, {"instances", json::array({d2_address})}});
  EXPECT_EQ(added.result_int(), 200) << added.body();
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = health()["decode_instances"] == 2;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(up);
  // Both decodes serve now.
  for (int i = 0; i < 4; ++i) post(proxy.port(), "/v1/completions", {{"prompt", "q"}});
  EXPECT_GE(d2.seen().size(), 1u);
  EXPECT_GE(d.seen().size(), 1u);
  const std::string d_address = "127.0.0.1:" + std::to_string(d.port());
  EXPECT_EQ(post(proxy.port(), "/instances/remove",
                 {{"type", "decode"}, {"instances", json::array({d_address})}})
                .result_int(),
            200);
  EXPECT_EQ(health()["decode_instances"], 1);
  const size_t before = d.seen().size();
  for (int i = 0; i < 3; ++i) post(proxy.port(), "/v1/completions", {{"prompt", "q"}});
  EXPECT_EQ(d.seen().size(), before);
  // Malformed management requests.
  EXPECT_EQ(post(proxy.port(), "/instances/add", {{"type", "both"}, {"instances", json::array()}})
                .result_int(),
            400);
  EXPECT_EQ(post(proxy.port(), "/instances/add",
                 {{"type", "decode"}, {"instances", json::array({"nohost"})}})
                .result_int(),
            400);
  {
    TestClient c(proxy.port());
    const auto bad =
        c.request("POST", "/v1/completions", "{not json", {{"Content-Type", "application/json"}});
    EXPECT_EQ(bad.result_int(), 400);
    EXPECT_TRUE(json::parse(bad.body()).contains("error"));
  }
  proxy.stop(std::chrono::seconds(1));
}

TEST(ProxyFlow, FlagsAreChecked) {
  ProxyOptions o;
  EXPECT_TRUE(check_proxy_options(o).ok());
  o.prefiller_ports = {1, 2};
  EXPECT_FALSE(check_proxy_options(o).ok());
  o = ProxyOptions();
  o.decoder_ports = {70000};
  EXPECT_FALSE(check_proxy_options(o).ok());
  o = ProxyOptions();
  o.max_retries = 0;
  EXPECT_FALSE(check_proxy_options(o).ok());
}

}  // namespace
}  // namespace kestrel::proxy
