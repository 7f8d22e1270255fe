// The --api-key check: exact Bearer tokens only, compared without an early exit.
#include "server/api_key.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

TEST(ApiKey, ConstantTimeEqualIsEquality) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("s3cr3t", "s3cr3t"));
  EXPECT_FALSE(constant_time_equal("s3cr3t", "s3cr3T"));
  EXPECT_FALSE(constant_time_equal("s3cr3t", "s3cr3"));
  EXPECT_FALSE(constant_time_equal("s3cr3", "s3cr3t"));
  EXPECT_FALSE(constant_time_equal(std::string_view("a\0b", 3), "a"));
  EXPECT_FALSE(constant_time_equal("", "x"));
}

TEST(ApiKey, BearerTokenMustMatchExactly) {
  EXPECT_TRUE(bearer_matches("Bearer k1", "k1"));
  EXPECT_FALSE(bearer_matches(std::nullopt, "k1"));
  EXPECT_FALSE(bearer_matches("Bearer k2", "k1"));
  EXPECT_FALSE(bearer_matches("Bearer k1 ", "k1"));
  EXPECT_FALSE(bearer_matches("bearer k1", "k1"));
  EXPECT_FALSE(bearer_matches("Basic k1", "k1"));
  EXPECT_FALSE(bearer_matches("k1", "k1"));
  EXPECT_FALSE(bearer_matches("Bearer", ""));
}

}  // namespace
}  // namespace kestrel::server
