// EngineClient: the threaded engine as the CLI and server use it — concurrent submitters, streams
// read from other threads, aborts, stop strings that end requests in the core, shutdown with
// requests in flight, and validation that leaves no trace.
#include "engine/engine_client.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/mmap_file.h"
#include "engine/local_engine.h"
#include "model/loader.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8_sequence.h"

namespace kestrel {
namespace {

using namespace std::chrono_literals;

// decode() as text: ill-formed bytes become U+FFFD the way streamed text has them (random fixture
// tokens often split characters).
std::string repaired(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Sequence seq = utf8_sequence(std::string_view(bytes).substr(i));
    out += seq.kind == Utf8Sequence::kValid ? bytes.substr(i, seq.length) : "\xEF\xBF\xBD";
    i += seq.length;
  }
  return out;
}

struct Golden {
  std::vector<std::vector<int32_t>> prompts, greedy;
};

class EngineClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokenizer_dir = test::shared_dir() + "/testdata/tokenizers/qwen3";
    KESTREL_SKIP_IF_ABSENT(tokenizer_dir, "the shared qwen3 tokenizer");
    const std::string dir = test::fixtures_dir() + "/models/llama3_f32";
    LoadOptions o;
    o.model = dir;
    o.threads = 1;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m);
    auto text = read_text_file(dir + "/golden.json");
    ASSERT_TRUE(text.ok());
    const auto j = nlohmann::json::parse(*text);
    golden_.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
    golden_.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
    // Any byte-level BPE vocabulary decodes the fixture's 512 ids.
    auto tok = load_tokenizer(tokenizer_dir);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tokenizer_ = std::move(*tok);
  }

  EngineClientOptions options(int32_t num_blocks = 64) const {
    EngineClientOptions o;
    o.scheduler.block_size = 16;
    o.scheduler.num_blocks = num_blocks;
    o.scheduler.max_model_len = 256;
    o.scheduler.max_num_batched_tokens = 64;
    o.eos_token_ids = {};
    return o;
  }

  static GenerateRequest greedy(const std::string& id, const std::vector<int32_t>& prompt,
                                int64_t max_tokens, bool text = false) {
    GenerateRequest r;
    r.id = id;
    r.engine.prompt_token_ids = prompt;
    r.engine.sampling.temperature = 0.0f;
    r.engine.max_tokens = max_tokens;
    r.engine.ignore_eos = true;
    r.output.detokenize = text;
    return r;
  }

  // Reads a stream to its end, checking that nothing follows the finished output.
  static RequestOutput drain(RequestStream& s) {
    RequestOutput all;
    while (!all.finished()) all.merge(s.next());
    EXPECT_FALSE(s.try_next().has_value()) << "output after finishing";
    return all;
  }

  // Waits (bounded) until the engine holds no request and no block.
  static void expect_idle(const EngineClient& c) {
    for (int i = 0; i < 500; ++i) {
      const EngineStats s = c.stats();
      if (s.num_running == 0 && s.num_waiting == 0 && s.kv_cache_usage == 0.0) return;
      std::this_thread::sleep_for(2ms);
    }
    const EngineStats s = c.stats();
    ADD_FAILURE() << "engine not idle: running " << s.num_running << " waiting " << s.num_waiting
                  << " kv usage " << s.kv_cache_usage;
  }

  std::unique_ptr<LoadedModel> lm_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Golden golden_;
};

TEST_F(EngineClientTest, GoldenTokensFromConcurrentSubmitters) {
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  constexpr int kThreads = 4, kPerThread = 6;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0}, done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t p = size_t(t + i) % 3;
        const std::string id = std::to_string(t) + "-" + std::to_string(i);
        auto stream =
            client.add_request(greedy(id, golden_.prompts[p], int64_t(golden_.greedy[p].size())));
        if (!stream.ok()) {
          ++mismatches;
          continue;
        }
        const RequestOutput out = drain(**stream);
        if (out.token_ids != golden_.greedy[p] || out.finish_reason != FinishReason::kLength ||
            out.num_prompt_tokens != int64_t(golden_.prompts[p].size()) ||
            out.num_output_tokens != int64_t(golden_.greedy[p].size()))
          ++mismatches;
        ++done;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kThreads * kPerThread);
  EXPECT_EQ(mismatches.load(), 0);
  expect_idle(client);
  const EngineStats s = client.stats();
  EXPECT_FALSE(s.dead);
  EXPECT_EQ(s.counters.generation_tokens, kThreads * kPerThread * 16);
  // Repeated prompts hit the prefix cache: fewer prompt tokens computed than submitted.
  int64_t submitted = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) submitted += int64_t(golden_.prompts[(t + i) % 3].size());
  EXPECT_LT(s.counters.prompt_tokens_computed, submitted);
  EXPECT_GT(s.prefix_cache_hits, 0);
}

TEST_F(EngineClientTest, TextDeltasAddUpToTheDecodedTokens) {
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  auto stream = client.add_request(greedy("t", golden_.prompts[1], 16, /*text=*/true));
  ASSERT_TRUE(stream.ok()) << stream.error().message;
  const RequestOutput out = drain(**stream);
  EXPECT_EQ(out.token_ids, golden_.greedy[1]);
  EXPECT_EQ(out.text,
            repaired(tokenizer_->decode(golden_.greedy[1], /*skip_special_tokens=*/true)));
}

TEST_F(EngineClientTest, AbortFromAnotherThreadFreesBlocks) {
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  // The core keeps generating while the abort is on its way, and the fixture model can finish
  // its 200 tokens first when this thread is descheduled (a loaded CI machine): such a try
  // proves nothing about abort, so a few are allowed; every one must leave the engine idle.
  bool aborted = false;
  for (int attempt = 0; attempt < 5 && !aborted; ++attempt) {
    auto stream = client.add_request(greedy("long", golden_.prompts[2], 200));
    ASSERT_TRUE(stream.ok());
    const RequestOutput first = (*stream)->next();
    if (first.finished()) continue;
    std::thread([&] { client.abort("long"); }).join();
    const RequestOutput rest = drain(**stream);
    expect_idle(client);
    if (rest.finish_reason == FinishReason::kLength) continue;
    EXPECT_EQ(rest.finish_reason, FinishReason::kAbort);
    EXPECT_LT(first.token_ids.size() + rest.token_ids.size(), 200u);
    aborted = true;
  }
  EXPECT_TRUE(aborted) << "every request finished before its abort arrived";
  // The id is free again once the core let go of it.
  auto again = client.add_request(greedy("long", golden_.prompts[0], 2));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(drain(**again).token_ids.size(), 2u);
}

TEST_F(EngineClientTest, StopStringEndsTheRequestInTheCore) {
  const auto& want = golden_.greedy[0];
  const std::string full = repaired(tokenizer_->decode(want, true));
  // A stop string taken from the text after the first tokens, so it lies past the start.
  const std::string head =
      repaired(tokenizer_->decode(std::vector<int32_t>(want.begin(), want.begin() + 4), true));
  ASSERT_GT(full.size(), head.size() + 3);
  const std::string stop = full.substr(head.size(), 3);
  const size_t at = full.find(stop);
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  GenerateRequest r = greedy("s", golden_.prompts[0], 200, /*text=*/true);
  r.output.stop = {stop};
  auto stream = client.add_request(r);
  ASSERT_TRUE(stream.ok());
  const RequestOutput out = drain(**stream);
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  ASSERT_TRUE(std::holds_alternative<std::string>(out.stop_reason));
  EXPECT_EQ(std::get<std::string>(out.stop_reason), stop);
  EXPECT_EQ(out.text, full.substr(0, at));
  EXPECT_LT(out.token_ids.size(), 200u);
  expect_idle(client);
}

TEST_F(EngineClientTest, ShutdownFinishesInFlightRequests) {
  // 4,000 tokens each: still running at the shutdown however this thread is scheduled.
  EngineClientOptions o = options(800);
  o.scheduler.max_model_len = 4096;
  auto client = build_local_engine(*lm_->model, tokenizer_.get(), std::move(o));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    auto s = client->add_request(greedy("r" + std::to_string(i), golden_.prompts[size_t(i)], 4000));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  client->shutdown();
  for (auto& s : streams) EXPECT_EQ(drain(*s).finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(client->add_request(greedy("late", golden_.prompts[0], 2)).ok());
  client.reset();  // a second shutdown in the destructor is harmless
}

TEST_F(EngineClientTest, RejectsInvalidRequestsWithoutSideEffects) {
  // "dup" may run 4,000 tokens, far longer than the checks below take however the test thread
  // is scheduled, so it is live for the duplicate check and still running when aborted.
  EngineClientOptions o = options(300);
  o.scheduler.max_model_len = 4096;
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), std::move(o));
  EngineClient& client = *client_owner;
  auto live = client.add_request(greedy("dup", golden_.prompts[0], 4000));
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE(client.add_request(greedy("dup", golden_.prompts[0], 2)).ok());
  client.abort("dup");
  EXPECT_FALSE(client.add_request(greedy("", golden_.prompts[0], 2)).ok());
  EXPECT_FALSE(client.add_request(greedy("empty", {}, 2)).ok());
  EXPECT_FALSE(client.add_request(greedy("vocab", {1, 512}, 2)).ok());
  EXPECT_FALSE(client.add_request(greedy("neg", {-1}, 2)).ok());
  EXPECT_FALSE(client.add_request(greedy("zero", golden_.prompts[0], 0)).ok());
  EXPECT_FALSE(client.add_request(greedy("long", std::vector<int32_t>(4096, 3), 2)).ok());
  GenerateRequest min = greedy("min", golden_.prompts[0], 2);
  min.engine.min_tokens = 3;
  EXPECT_FALSE(client.add_request(min).ok());
  GenerateRequest stop_ids = greedy("stopids", golden_.prompts[0], 2);
  stop_ids.output.stop = {"x"};  // stop strings need text
  EXPECT_FALSE(client.add_request(stop_ids).ok());
  EXPECT_EQ(drain(**live).finish_reason, FinishReason::kAbort);
  expect_idle(client);
  // None of the rejected ids is held.
  for (const char* id : {"empty", "vocab", "zero", "long", "min", "stopids"})
    EXPECT_TRUE(client.add_request(greedy(id, golden_.prompts[0], 1)).ok()) << id;
}

// Requests get dense handles that are reused once a request is gone: sequential requests (the
// same API id again, or new ones) never grow the engine's tables past the peak number live at
// once, and a reused handle carries no state of its previous request.
TEST_F(EngineClientTest, RequestHandlesAreReusedAfterRequestsFinish) {
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  for (int i = 0; i < 20; ++i) {
    auto s = client.add_request(
        greedy(i % 2 ? "same" : "r" + std::to_string(i), golden_.prompts[size_t(i) % 3], 16));
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(drain(**s).token_ids, golden_.greedy[size_t(i) % 3]) << i;
  }
  EXPECT_EQ(client.num_request_handles(), 1u);
  // Three at once, one aborted halfway: three handles, and each stream gets its own tokens.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t p = 0; p < 3; ++p) {
    auto s = client.add_request(greedy("c" + std::to_string(p), golden_.prompts[p], 16));
    ASSERT_TRUE(s.ok()) << s.error().message;
    streams.push_back(*s);
  }
  client.abort("c1");
  EXPECT_EQ(drain(*streams[0]).token_ids, golden_.greedy[0]);
  EXPECT_EQ(drain(*streams[2]).token_ids, golden_.greedy[2]);
  drain(*streams[1]);
  expect_idle(client);
  EXPECT_EQ(client.num_request_handles(), 3u);
  auto again = client.add_request(greedy("c1", golden_.prompts[1], 16));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(drain(**again).token_ids, golden_.greedy[1]);
  EXPECT_EQ(client.num_request_handles(), 3u);
}

TEST_F(EngineClientTest, TokenIdOnlyClientWithoutTokenizer) {
  const auto client_owner = build_local_engine(*lm_->model, nullptr, options());
  EngineClient& client = *client_owner;
  EXPECT_FALSE(client.add_request(greedy("text", golden_.prompts[0], 2, /*text=*/true)).ok());
  auto s = client.add_request(greedy("ids", golden_.prompts[0], 16));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(drain(**s).token_ids, golden_.greedy[0]);
}

TEST_F(EngineClientTest, NotifyRunsWhenOutputArrives) {
  const auto client_owner = build_local_engine(*lm_->model, tokenizer_.get(), options());
  EngineClient& client = *client_owner;
  auto s = client.add_request(greedy("n", golden_.prompts[0], 16));
  ASSERT_TRUE(s.ok());
  std::mutex mu;
  std::condition_variable cv;
  int notified = 0;
  (*s)->set_notify([&] {
    std::lock_guard lock(mu);
    ++notified;
    cv.notify_all();
  });
  std::vector<int32_t> tokens;
  bool finished = false;
  while (!finished) {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return notified > 0; })) << "no notification";
    notified = 0;
    lock.unlock();
    while (auto out = (*s)->try_next()) {
      tokens.insert(tokens.end(), out->token_ids.begin(), out->token_ids.end());
      finished = out->finished();
    }
  }
  EXPECT_EQ(tokens, golden_.greedy[0]);
}

}  // namespace
}  // namespace kestrel
