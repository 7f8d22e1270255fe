// logit_bias, allowed_token_ids and bad_words on one logits row.
#include "runner/logits_rules.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace kestrel {
namespace {

std::vector<float> row() {
  return {0.5f, 1.0f, -2.0f, 3.0f, 0.0f, 7.0f};
}

TEST(LogitsRules, BiasIsAddedToTheListedTokens) {
  LogitsRules r;
  r.logit_bias = {{1, 2.5f}, {3, -100.0f}};
  std::vector<float> l = row();
  apply_logits_rules(r, {}, l);
  EXPECT_FLOAT_EQ(l[1], 3.5f);
  EXPECT_FLOAT_EQ(l[3], -97.0f);
  EXPECT_FLOAT_EQ(l[0], 0.5f);
  EXPECT_FLOAT_EQ(l[5], 7.0f);
}

TEST(LogitsRules, AllowedTokensKeepTheirLogitsAndTheRestIsMasked) {
  LogitsRules r;
  r.allowed_token_ids = {2, 4};
  std::vector<float> l = row();
  apply_logits_rules(r, {}, l);
  for (size_t i = 0; i < l.size(); ++i) {
    if (i == 2 || i == 4) {
      EXPECT_FLOAT_EQ(l[i], row()[i]);
    } else {
      EXPECT_TRUE(std::isinf(l[i]) && l[i] < 0) << i;
    }
  }
}

TEST(LogitsRules, BiasAppliesAfterTheAllowedMask) {
  LogitsRules r;
  r.allowed_token_ids = {0};
  r.logit_bias = {{0, 1.0f}, {5, 50.0f}};
  std::vector<float> l = row();
  apply_logits_rules(r, {}, l);
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_TRUE(std::isinf(l[5]));  // a bias cannot revive a token outside the allowed set
}

TEST(LogitsRules, SingleTokenBadWordIsAlwaysMasked) {
  LogitsRules r;
  r.bad_words = {{5}};
  std::vector<float> l = row();
  apply_logits_rules(r, {}, l);
  EXPECT_TRUE(std::isinf(l[5]));
  EXPECT_FLOAT_EQ(l[3], 3.0f);
}

TEST(LogitsRules, MultiTokenBadWordMasksItsLastTokenOnlyAfterItsPrefix) {
  LogitsRules r;
  r.bad_words = {{1, 2, 3}};
  const std::vector<int32_t> after_prefix = {4, 1, 2};
  const std::vector<int32_t> partial = {4, 0, 2};
  const std::vector<int32_t> too_short = {2};
  std::vector<float> l = row();
  apply_logits_rules(r, after_prefix, l);
  EXPECT_TRUE(std::isinf(l[3]));
  l = row();
  apply_logits_rules(r, partial, l);
  EXPECT_FLOAT_EQ(l[3], 3.0f);
  l = row();
  apply_logits_rules(r, too_short, l);
  EXPECT_FLOAT_EQ(l[3], 3.0f);
}

TEST(LogitsRules, IdsOutsideTheRowAreIgnored) {
  LogitsRules r;
  r.logit_bias = {{6, 1.0f}, {-1, 1.0f}};
  r.bad_words = {{99}};
  std::vector<float> l = row();
  apply_logits_rules(r, {}, l);
  EXPECT_EQ(l, row());
}

}  // namespace
}  // namespace kestrel
