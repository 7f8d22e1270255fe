// bench/kl_divergence.h: KL(reference ‖ test), top-1 agreement and perplexities of known
// distributions.
#include "bench/kl_divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kestrel::bench {
namespace {

TEST(KlDivergence, EqualDistributionsGiveZero) {
  KlStats s;
  const std::vector<float> a = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> shifted = a;
  for (float& v : shifted) v += 7.0f;  // logits are defined up to a constant
  add_position(s, a, shifted, 2);
  EXPECT_EQ(s.positions, 1);
  EXPECT_NEAR(s.mean_kl(), 0.0, 1e-12);
  EXPECT_EQ(s.top1_agreement(), 1.0);
  EXPECT_NEAR(s.ppl_ref(), s.ppl_test(), 1e-9);
}

TEST(KlDivergence, KnownTwoTokenDistributions) {
  KlStats s;
  // p = (1/2, 1/2), q = (3/4, 1/4).
  add_position(s, std::vector<float>{0.0f, 0.0f}, std::vector<float>{float(std::log(3.0)), 0.0f},
               1);
  const double kl = 0.5 * std::log(0.5 / 0.75) + 0.5 * std::log(0.5 / 0.25);
  EXPECT_NEAR(s.mean_kl(), kl, 1e-7);
  EXPECT_NEAR(s.ppl_ref(), 2.0, 1e-7);
  EXPECT_NEAR(s.ppl_test(), 4.0, 1e-6);
  // Top tokens: the reference's tie goes to the first, the test's is token 0 too.
  EXPECT_EQ(s.top1_agreement(), 1.0);

  // A second position whose top tokens differ halves the agreement; the mean and its error
  // follow the two values.
  add_position(s, std::vector<float>{0.0f, 2.0f}, std::vector<float>{2.0f, 0.0f}, 0);
  EXPECT_EQ(s.positions, 2);
  EXPECT_EQ(s.top1_agreement(), 0.5);
  const double e = 1 / (1 + std::exp(-2.0));  // p(1) of the reference
  const double kl2 = e * std::log(e / (1 - e)) + (1 - e) * std::log((1 - e) / e);
  EXPECT_NEAR(s.mean_kl(), (kl + kl2) / 2, 1e-6);
  EXPECT_NEAR(s.kl_max, kl2, 1e-6);
  EXPECT_NEAR(s.kl_stderr(), std::fabs(kl2 - kl) / 2, 1e-6);
}

TEST(KlDivergenceDeathTest, RejectsMismatchedVocabularies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KlStats s;
  EXPECT_DEATH(add_position(s, std::vector<float>{0, 0}, std::vector<float>{0, 0, 0}, 0),
               "reference and");
  EXPECT_DEATH(add_position(s, std::vector<float>{0, 0}, std::vector<float>{0, 0}, 2),
               "next token");
}

}  // namespace
}  // namespace kestrel::bench
