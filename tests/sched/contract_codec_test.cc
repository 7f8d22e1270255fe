#include "sched/contract_codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <msgpack.hpp>

namespace kestrel {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SchedulerOutput full_scheduler_output() {
  SchedulerOutput out;
  for (int r = 0; r < 3; ++r) {
    NewRequestData n;
    n.id = RequestHandle(10 + r);
    n.prompt_token_ids = {1, 200 + r, 70000, -5, 2147483647};
    RequestSampling& s = n.sampling;
    s.params = {.temperature = 0.7f + r,
                .top_k = 40 + r,
                .top_p = 0.9f,
                .min_p = 0.05f,
                .repetition_penalty = 1.1f,
                .presence_penalty = -0.5f,
                .frequency_penalty = 0.25f,
                .logprobs = 5};
    s.seed = 0xfedcba9876543210ull + r;
    s.min_tokens = 3;
    s.min_tokens_suppressed = {2, 151643};
    s.prompt_logprobs = 2;
    s.rules.logit_bias = {{.token = 11, .bias = -100.0f}, {.token = 12, .bias = 3.5f}};
    s.rules.allowed_token_ids = {11, 12, 13};
    s.rules.bad_words = {{7}, {8, 9, 10}, {}};
    n.block_ids = {{1, 2, 3}, {4}, {}};
    n.num_computed_tokens = 16 + r;
    out.new_requests.push_back(n);
  }
  out.cached_requests = {{.id = 20,
                          .resumed_from_preemption = false,
                          .new_block_ids = {{9}},
                          .num_computed_tokens = 40},
                         {.id = 21,
                          .resumed_from_preemption = true,
                          .new_block_ids = {{5, 6, 7}, {8}},
                          .num_computed_tokens = 0}};
  out.scheduled = {{.id = 10, .num_tokens = 5, .draft_token_ids = {}, .state_slot = 3},
                   {.id = 20, .num_tokens = 4, .draft_token_ids = {100, 101, 102}}};
  out.token_masks = {{.id = 11, .bits = {0, ~0ull, 0x8000000000000001ull}}};
  out.preempted_ids = {22, 0};
  out.finished_ids = {30, 31, 0xffffffffu};  // the whole handle range
  out.total_num_scheduled_tokens = 9;
  out.kv_loads = {{.load_id = 0xffffffffffull,
                   .id = 40,
                   .host = "10.0.0.7",
                   .port = 30200,
                   .tp_size = 8,
                   .remote_blocks = {5, 6, 900000},
                   .local_blocks = {1, 2, 3},
                   .remote_state = 130,
                   .local_state = 66,
                   .timeout_ms = 1500}};
  out.state_ops = {{.kind = StateOpKind::kCopyBefore, .id = 20, .src = 1, .snapshot = 2, .dst = 72},
                   {.kind = StateOpKind::kCopyBefore, .id = 10, .src = 70, .dst = 3},
                   {.kind = StateOpKind::kHold, .id = 40, .src = 0, .dst = 73},
                   {.kind = StateOpKind::kCopyAfter, .id = 10, .src = 3, .dst = 0x7fffffff}};
  return out;
}

RunnerOutput full_runner_output() {
  RunnerOutput out;
  TokenLogprobs lp{.token = 42,
                   .logprob = -0.125f,
                   .rank = 1,
                   .top = {{.token = 42, .logprob = -0.125f}, {.token = 7, .logprob = -kInf}}};
  TokenLogprobs lp2{.token = 43, .logprob = -kInf, .rank = 151000, .top = {}};
  out.sampled = {
      {.id = 1, .tokens = {42, 43, 44}, .logprobs = {lp, lp2, lp}, .draft_token_ids = {5, 6}},
      {.id = 1, .tokens = {9}, .logprobs = {}, .draft_token_ids = {}}};
  out.prompt_logprobs = {{2, {lp2, lp}}, {3, {}}};
  out.failures = {{.id = 3, .no_token_allowed = true, .error = ""},
                  {.id = 4, .no_token_allowed = false, .error = "sampler blew up"}};
  out.kv_loads = {{.load_id = 40, .ok = true, .error = "", .bytes = 1 << 20},
                  {.load_id = 41, .ok = false, .error = "connection refused", .bytes = 0}};
  return out;
}

// [tag, body] with a body written by `body`, for hand-made malformed messages.
template <typename F>
std::string hand_made(const char* tag, F&& body) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> p(buf);
  p.pack_array(2);
  p.pack(std::string(tag));
  body(p);
  return std::string(buf.data(), buf.size());
}

TEST(ContractCodecTest, RoundTripsFullSchedulerOutput) {
  const SchedulerOutput in = full_scheduler_output();
  Expected<SchedulerOutput> out = decode_scheduler_output(encode(in));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, in);
}

TEST(ContractCodecTest, RoundTripsFullRunnerOutput) {
  const RunnerOutput in = full_runner_output();
  Expected<RunnerOutput> out = decode_runner_output(encode(in));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(*out, in);
  EXPECT_EQ(out->sampled[0].logprobs[0].top[1].logprob, -kInf);
}

TEST(ContractCodecTest, RoundTripsEmptyStructs) {
  Expected<SchedulerOutput> s = decode_scheduler_output(encode(SchedulerOutput{}));
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(*s, SchedulerOutput{});
  Expected<RunnerOutput> r = decode_runner_output(encode(RunnerOutput{}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, RunnerOutput{});
}

TEST(ContractCodecTest, FloatsRoundTripBitExactly) {
  const std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u,  // ±0
      0x7f800000u, 0xff800000u,  // ±inf
      0x7fc00000u, 0xffc00001u,  // quiet NaNs, one with a payload
      0x00000001u, 0x7f7fffffu,  // smallest denormal, largest finite
      0x3dcccccdu};              // 0.1f
  RunnerOutput in;
  RequestSamples s{.id = 5, .tokens = {}, .logprobs = {}, .draft_token_ids = {}};
  for (uint32_t b : bits) {
    s.tokens.push_back(1);
    s.logprobs.push_back({.token = 1, .logprob = std::bit_cast<float>(b), .rank = 0, .top = {}});
  }
  in.sampled.push_back(s);
  Expected<RunnerOutput> out = decode_runner_output(encode(in));
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->sampled.at(0).logprobs.size(), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(out->sampled[0].logprobs[i].logprob), bits[i]) << i;
  }
}

TEST(ContractCodecTest, WrongKindIsError) {
  Expected<SchedulerOutput> s = decode_scheduler_output(encode(full_runner_output()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("kestrel.runner_output.v3"), std::string::npos)
      << s.error().message;
  EXPECT_FALSE(decode_runner_output(encode(full_scheduler_output())).ok());
}

TEST(ContractCodecTest, FutureVersionIsError) {
  std::string bytes = hand_made("kestrel.sched_output.v7", [](auto& p) { p.pack_array(0); });
  Expected<SchedulerOutput> s = decode_scheduler_output(bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("v6"), std::string::npos) << s.error().message;
}

TEST(ContractCodecTest, WrongTypeNamesTheField) {
  // SchedulerOutput whose first new request has a string id (handles are integers).
  std::string bytes = hand_made("kestrel.sched_output.v6", [](auto& p) {
    p.pack_array(9);
    p.pack_array(1);
    p.pack_array(5);
    p.pack(std::string("req-17"));
    for (int i = 0; i < 4; ++i) p.pack_nil();
    for (int i = 0; i < 5; ++i) p.pack_array(0);
    p.pack(0);
    for (int i = 0; i < 2; ++i) p.pack_array(0);
  });
  Expected<SchedulerOutput> s = decode_scheduler_output(bytes);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("new_requests[0].id"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("expected an integer"), std::string::npos) << s.error().message;
}

TEST(ContractCodecTest, WrongArrayLengthAndRangeAreErrors) {
  // A body of 8 fields instead of 9.
  std::string short_body = hand_made("kestrel.sched_output.v6", [](auto& p) {
    p.pack_array(8);
    for (int i = 0; i < 8; ++i) p.pack_array(0);
  });
  EXPECT_FALSE(decode_scheduler_output(short_body).ok());
  // A TokenLogprob whose token does not fit int32.
  std::string big_token = hand_made("kestrel.runner_output.v3", [](auto& p) {
    p.pack_array(4);
    p.pack_array(1);
    p.pack_array(4);
    p.pack(1);
    p.pack_array(1);
    p.pack(int64_t{1} << 40);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
  });
  Expected<RunnerOutput> r = decode_runner_output(big_token);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("sampled[0].tokens[0]"), std::string::npos) << r.error().message;
  // A request handle that does not fit 32 bits.
  std::string big_id = hand_made("kestrel.runner_output.v3", [](auto& p) {
    p.pack_array(4);
    p.pack_array(1);
    p.pack_array(4);
    p.pack(int64_t{1} << 32);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
    p.pack_array(0);
  });
  r = decode_runner_output(big_id);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("sampled[0].id"), std::string::npos) << r.error().message;
}

TEST(ContractCodecTest, AnUnknownStateOpKindIsError) {
  SchedulerOutput out;
  out.state_ops = {{.kind = static_cast<StateOpKind>(7), .id = 1, .src = 0, .dst = 3}};
  auto back = decode_scheduler_output(encode(out));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message.find("unknown state op kind 7"), std::string::npos)
      << back.error().message;
}

TEST(ContractCodecTest, EveryTruncationIsError) {
  const std::string s = encode(full_scheduler_output());
  for (size_t len = 0; len < s.size(); ++len) {
    EXPECT_FALSE(decode_scheduler_output(std::string_view(s).substr(0, len)).ok()) << len;
  }
  const std::string r = encode(full_runner_output());
  for (size_t len = 0; len < r.size(); ++len) {
    EXPECT_FALSE(decode_runner_output(std::string_view(r).substr(0, len)).ok()) << len;
  }
}

TEST(ContractCodecTest, TrailingGarbageIsError) {
  std::string s = encode(full_scheduler_output());
  Expected<SchedulerOutput> one = decode_scheduler_output(s + '\0');
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("trailing"), std::string::npos) << one.error().message;
  EXPECT_FALSE(decode_scheduler_output(s + s).ok());
  EXPECT_FALSE(decode_runner_output(encode(RunnerOutput{}) + "xyz").ok());
}

TEST(ContractCodecTest, FlippedBytesNeverCrash) {
  const std::string sched = encode(full_scheduler_output());
  const std::string runner = encode(full_runner_output());
  std::mt19937 rng(12345);
  int ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bytes = iter % 2 ? sched : runner;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % bytes.size();
      if (rng() % 2) {
        bytes[at] = static_cast<char>(rng());
      } else {
        bytes[at] ^= static_cast<char>(1u << (rng() % 8));
      }
    }
    if (iter % 2) {
      Expected<SchedulerOutput> d = decode_scheduler_output(bytes);
      if (d.ok()) {
        ++ok;
        Expected<SchedulerOutput> again = decode_scheduler_output(encode(*d));
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(encode(*again), encode(*d));
      } else {
        EXPECT_FALSE(d.error().message.empty());
      }
    } else {
      Expected<RunnerOutput> d = decode_runner_output(bytes);
      if (d.ok()) {
        ++ok;
        Expected<RunnerOutput> again = decode_runner_output(encode(*d));
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(encode(*again), encode(*d));
      } else {
        EXPECT_FALSE(d.error().message.empty());
      }
    }
  }
  // Some mutations only change a value; the rest must all have been rejected cleanly.
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, 4000);
}

TEST(ContractCodecTest, HugeLengthsAreErrorsWithoutHugeAllocation) {
  // array32 header claiming 2^31 elements, at the top and nested in the body.
  const std::string top("\xdd\x80\x00\x00\x00", 5);
  Expected<SchedulerOutput> a = decode_scheduler_output(top);
  ASSERT_FALSE(a.ok());
  EXPECT_FALSE(a.error().message.empty());

  std::string nested = hand_made("kestrel.sched_output.v6", [](auto& p) { p.pack_array(9); });
  nested += std::string("\xdd\x80\x00\x00\x00", 5);
  EXPECT_FALSE(decode_scheduler_output(nested).ok());

  // map32 and str32 headers claiming 4 GiB, and deep nesting.
  EXPECT_FALSE(decode_runner_output(std::string("\xdf\xff\xff\xff\xff", 5)).ok());
  EXPECT_FALSE(decode_runner_output(std::string("\x92\xdb\xff\xff\xff\xff", 6)).ok());
  EXPECT_FALSE(decode_runner_output(std::string(100000, '\x91') + '\xc0').ok());
}

}  // namespace
}  // namespace kestrel
