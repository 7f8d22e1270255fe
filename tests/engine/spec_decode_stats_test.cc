// Speculative decoding's counters count as vLLM's do, and the periodic log line states the
// interval's mean acceptance length (1 + accepted / drafts), per-position and average rates.
#include "engine/spec_decode_stats.h"

#include <gtest/gtest.h>

namespace kestrel {
namespace {

TEST(SpecDecodeStats, ObserveCountsDraftsTokensAndPositions) {
  SpecDecodeStats s;
  s.observe(0, 0);  // a step without drafts counts nothing
  EXPECT_TRUE(s.empty());
  s.observe(3, 3);
  s.observe(3, 1);
  s.observe(2, 0);
  EXPECT_EQ(s.num_drafts, 3);
  EXPECT_EQ(s.num_draft_tokens, 8);
  EXPECT_EQ(s.num_accepted_tokens, 4);
  EXPECT_EQ(s.accepted_per_pos, (std::vector<int64_t>{2, 1, 1}));
}

TEST(SpecDecodeStats, LogLineCoversTheIntervalOnly) {
  SpecDecodeStats before;
  before.observe(4, 4);  // before the interval: must not count
  SpecDecodeStats now = before;
  now.observe(4, 2);
  now.observe(4, 0);
  const std::string line = spec_decode_log_line(before, now, 2.0);
  EXPECT_NE(line.find("SpecDecoding metrics: Mean acceptance length: 2.00,"), std::string::npos)
      << line;
  EXPECT_NE(line.find("Accepted throughput: 1.00 tokens/s"), std::string::npos) << line;
  EXPECT_NE(line.find("Drafted throughput: 4.00 tokens/s"), std::string::npos) << line;
  EXPECT_NE(line.find("Accepted: 2 tokens, Drafted: 8 tokens"), std::string::npos) << line;
  EXPECT_NE(line.find("Per-position acceptance rate: 0.500, 0.500, 0.000, 0.000,"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("Avg Draft acceptance rate: 25.0%"), std::string::npos) << line;
}

}  // namespace
}  // namespace kestrel
