#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace kestrel {
namespace {

const std::vector<int32_t> kTokens = {101, 7, 99, 4242, 5, 17, 3, 8};

TEST(BlockHash, Deterministic) {
  EXPECT_EQ(hash_block(std::nullopt, kTokens, {}), hash_block(std::nullopt, kTokens, {}));
  const BlockHash p = hash_block(std::nullopt, kTokens, {});
  EXPECT_EQ(hash_block(p, kTokens, {}), hash_block(p, kTokens, {}));
}

TEST(BlockHash, ParentChangesHash) {
  const BlockHash a = hash_block(std::nullopt, std::vector<int32_t>{1, 2, 3, 4}, {});
  const BlockHash b = hash_block(std::nullopt, std::vector<int32_t>{1, 2, 3, 5}, {});
  ASSERT_NE(a, b);
  EXPECT_NE(hash_block(a, kTokens, {}), hash_block(b, kTokens, {}));
  EXPECT_NE(hash_block(std::nullopt, kTokens, {}), hash_block(a, kTokens, {}));
  // A parent whose value is all zeros is still distinct from having no parent.
  EXPECT_NE(hash_block(std::nullopt, kTokens, {}), hash_block(BlockHash{}, kTokens, {}));
}

TEST(BlockHash, TokensAndExtraKeysMatter) {
  const BlockHash base = hash_block(std::nullopt, kTokens, {});
  std::vector<int32_t> changed = kTokens;
  changed[5] += 1;
  EXPECT_NE(base, hash_block(std::nullopt, changed, {}));
  const std::vector<uint64_t> lora = {7};
  const std::vector<uint64_t> other_lora = {8};
  EXPECT_NE(base, hash_block(std::nullopt, kTokens, lora));
  EXPECT_NE(hash_block(std::nullopt, kTokens, lora), hash_block(std::nullopt, kTokens, other_lora));
}

TEST(BlockHash, ExtendHashesOnlyFullBlocksAsAChain) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 11; ++i) tokens.push_back(1000 + 37 * i);
  std::vector<BlockHash> hashes;
  extend_block_hashes(tokens, 4, {}, &hashes);
  ASSERT_EQ(hashes.size(), 2u);  // 11 tokens: two full blocks of 4, a partial one left out
  const BlockHash h0 = hash_block(std::nullopt, std::span(tokens).first(4), {});
  EXPECT_EQ(hashes[0], h0);
  EXPECT_EQ(hashes[1], hash_block(h0, std::span(tokens).subspan(4, 4), {}));
  // Extending after one more token fills the third block and keeps the first two.
  tokens.push_back(5);
  extend_block_hashes(tokens, 4, {}, &hashes);
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(hashes[0], h0);
  EXPECT_EQ(hashes[2], hash_block(hashes[1], std::span(tokens).subspan(8, 4), {}));
}

}  // namespace
}  // namespace kestrel
