// The `bench serve` tokenizer codecs: the local one draws from the whole ordinary vocabulary; the
// remote one talks to mock servers that tokenize with a real tokenizer in vLLM's dialect
// (prompt / add_special_tokens → "prompt") and llama.cpp server's (content / add_special →
// "content"), and random prompts built through it have exact lengths under the real tokenizer.
// Servers that cannot tokenize give errors, not hangs.
#include "bench/token_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/serve_dataset.h"
#include "server/http/http_server.h"
#include "test_paths.h"

namespace kestrel::bench {
namespace {

using nlohmann::json;

std::string tokenizer_dir(const std::string& name) {
  return test::shared_dir() + "/testdata/tokenizers/" + name;
}

// Use after KESTREL_SKIP_IF_ABSENT(tokenizer_dir(name), ...): the tokenizer is shared test data.
std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto tok = load_tokenizer(tokenizer_dir(name));
  EXPECT_TRUE(tok.ok()) << name;
  return tok.ok() ? std::move(tok).value() : nullptr;
}

enum class Dialect { kVllm, kLlamaCpp };

// A server whose /tokenize and /detokenize answer with `tok` in one dialect.
struct TokenizingServer {
  TokenizingServer(const Tokenizer& tok, Dialect dialect)
      : server(server::HttpServerOptions{.host = "127.0.0.1"}) {
    const bool vllm = dialect == Dialect::kVllm;
    server.route(
        "POST", "/tokenize",
        [&tok, vllm, this](const server::HttpRequest& req, std::shared_ptr<server::Responder> r) {
          ++calls;
          const json body = json::parse(req.body);
          const std::string text = body.at(vllm ? "prompt" : "content");
          const bool special = body.value(vllm ? "add_special_tokens" : "add_special", vllm);
          json reply = {{"tokens", tok.encode(text, special)}};
          if (vllm) {
            reply["count"] = reply["tokens"].size();
            reply["max_model_len"] = 4096;
          }
          r->respond(200, "application/json", reply.dump());
        });
    server.route(
        "POST", "/detokenize",
        [&tok, vllm](const server::HttpRequest& req, std::shared_ptr<server::Responder> r) {
          const json body = json::parse(req.body);
          const std::string text = tok.decode(body.at("tokens").get<std::vector<int32_t>>(), false);
          // Servers replace broken UTF-8 before it goes into JSON.
          const json reply = {{vllm ? "prompt" : "content", text}};
          r->respond(200, "application/json",
                     reply.dump(-1, ' ', false, json::error_handler_t::replace));
        });
    EXPECT_TRUE(server.start().ok());
  }
  ~TokenizingServer() { server.shutdown(std::chrono::milliseconds(0)); }

  RemoteTokenizerOptions options() const {
    RemoteTokenizerOptions o;
    o.port = server.port();
    o.model = "m";
    return o;
  }

  server::HttpServer server;
  std::atomic<int> calls{0};
};

TEST(TokenCodec, LocalDrawsFromOrdinaryVocabulary) {
  KESTREL_SKIP_IF_ABSENT(tokenizer_dir("qwen3"), "the shared tokenizer");
  auto tok = load("qwen3");
  ASSERT_TRUE(tok);
  auto codec = local_token_codec(*tok);
  auto ids = codec->ordinary_ids();
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(std::is_sorted(ids->begin(), ids->end()));
  EXPECT_GT(ids->size(), 100000u);
  for (int32_t id : *ids) {
    ASSERT_FALSE(tok->is_special(id)) << id;
    ASSERT_FALSE(tok->token_bytes(id).empty()) << id;
  }
  auto enc = codec->encode("Hello world", true);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, tok->encode("Hello world", true));
  EXPECT_EQ(*codec->decode(*enc), tok->decode(*enc, false));
}

class RemoteCodec : public testing::TestWithParam<std::tuple<const char*, Dialect>> {};

TEST_P(RemoteCodec, RandomPromptsHaveExactLengthsUnderTheServersTokenizer) {
  KESTREL_SKIP_IF_ABSENT(tokenizer_dir(std::get<0>(GetParam())), "the shared tokenizer");
  auto tok = load(std::get<0>(GetParam()));
  ASSERT_TRUE(tok);
  TokenizingServer server(*tok, std::get<1>(GetParam()));
  auto codec = remote_token_codec(server.options());
  ASSERT_TRUE(codec.ok()) << codec.error().message;

  auto ids = (*codec)->ordinary_ids();
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_GT(ids->size(), 1000u);  // enough variety to draw prompts from
  for (int32_t id : *ids) ASSERT_FALSE(tok->is_special(id)) << id;

  RandomDatasetSpec spec;
  spec.num_prompts = 12;
  spec.input_len = 64;
  spec.output_len = 8;
  spec.prefix_len = 16;
  spec.range_ratio = 0.25;
  spec.seed = 7;
  auto got = random_dataset(**codec, spec);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->size(), 12u);
  const auto specials = static_cast<int64_t>(tok->encode("", true).size());
  std::set<int64_t> lens;
  for (const SampleRequest& r : *got) {
    EXPECT_EQ(tok->encode(r.prompt, false), r.prompt_ids);
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>(r.prompt_ids.size()));
    EXPECT_GE(r.prompt_len, 16 + (64 - specials) * 3 / 4);
    EXPECT_LE(r.prompt_len, 16 + (64 - specials) * 5 / 4 + 1);
    EXPECT_TRUE(std::equal(r.prompt_ids.begin(), r.prompt_ids.begin() + 16,
                           got->front().prompt_ids.begin()));
    lens.insert(r.prompt_len);
  }
  EXPECT_GT(lens.size(), 1u);
  EXPECT_GT(server.calls.load(), 12);  // the lengths really came from the server
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RemoteCodec,
                         testing::Values(std::make_tuple("llama3_1", Dialect::kVllm),
                                         std::make_tuple("qwen3", Dialect::kLlamaCpp),
                                         std::make_tuple("gemma3", Dialect::kVllm)));

// Error text of remote_token_codec against a server answering /tokenize with status + body.
std::string remote_error(int status, const std::string& body, bool stop_first = false) {
  server::HttpServer server(server::HttpServerOptions{.host = "127.0.0.1"});
  server.route("POST", "/tokenize",
               [status, body](const server::HttpRequest&, std::shared_ptr<server::Responder> r) {
                 r->respond(status, "application/json", body);
               });
  EXPECT_TRUE(server.start().ok());
  RemoteTokenizerOptions o;
  o.port = server.port();
  if (stop_first) server.shutdown(std::chrono::milliseconds(0));  // nobody listens any more
  auto codec = remote_token_codec(o);
  if (!stop_first) server.shutdown(std::chrono::milliseconds(0));
  return codec.ok() ? "" : codec.error().message;
}

TEST(TokenCodec, RemoteFailsClearlyWithoutATokenizingServer) {
  EXPECT_NE(
      remote_error(400, R"({"error":{"message":"no tokenizer"}})").find("/tokenize answered 400"),
      std::string::npos);
  EXPECT_NE(remote_error(200, R"({"count": 3})").find("\"tokens\""), std::string::npos);
  EXPECT_NE(remote_error(200, "[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(remote_error(200, R"({"tokens": []})").find("no tokens"), std::string::npos);
  EXPECT_NE(remote_error(200, "{}", /*stop_first=*/true).find("failed"), std::string::npos);
}

}  // namespace
}  // namespace kestrel::bench
