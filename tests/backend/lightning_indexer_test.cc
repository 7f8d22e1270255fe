// DeepSeek-V3.2's lightning indexer kernels: keys stored at the end of latent-cache rows, and
// each token's top-k choice against a float64 reference, the tie rule, short contexts, and the
// same choice whatever the batch or thread count.
#include "backend/cpu/lightning_indexer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

constexpr int kLatent = 8, kRope = 8, kDim = 32, kBlock = 4;

double as_stored(DType t, float x) {
  return t == DType::BF16 ? bf16_to_f32(f32_to_bf16(x)) : x;
}

// Sequences of ctx[s] tokens whose indexer keys sit in shuffled blocks of a latent cache; the
// last fresh[s] tokens of each are the batch's queries.
struct IndexerCache {
  std::vector<int> ctx, fresh;
  int max_blocks = 0;
  std::vector<std::vector<float>> keys;  // [s][pos · kDim]
  std::vector<int32_t> tables, positions, qsl{0};
  std::vector<int64_t> slots;
  std::vector<uint8_t> storage;
  MlaCacheLayer cache;

  IndexerCache(DType dtype, std::vector<int> ctx_lens, std::vector<int> new_lens, std::mt19937& rng,
               bool equal_keys = false)
      : ctx(std::move(ctx_lens)), fresh(std::move(new_lens)) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int S = int(ctx.size());
    int total = 0;
    for (int L : ctx) {
      max_blocks = std::max(max_blocks, (L + kBlock - 1) / kBlock);
      total += (L + kBlock - 1) / kBlock;
    }
    std::vector<int32_t> perm(size_t(total) + 2);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(size_t(S * max_blocks), -1);
    int next = 0;
    for (int s = 0; s < S; ++s)
      for (int b = 0; b < (ctx[s] + kBlock - 1) / kBlock; ++b)
        tables[s * max_blocks + b] = perm[next++];
    const size_t es = dtype == DType::F32 ? 4 : 2;
    storage.assign(perm.size() * kBlock * (kLatent + kRope + kDim) * es, 0xFF);  // NaN
    cache = {storage.data(), dtype, int64_t(perm.size()), kBlock, kLatent, kRope};
    cache.index_dim = kDim;
    std::vector<float> all;
    std::vector<int64_t> all_slots;
    std::vector<int32_t> all_pos;
    keys.resize(size_t(S));
    for (int s = 0; s < S; ++s) {
      for (int p = 0; p < ctx[s]; ++p) {
        for (int i = 0; i < kDim; ++i) keys[s].push_back(equal_keys ? 0.5f : nd(rng));
        all.insert(all.end(), keys[s].end() - kDim, keys[s].end());
        all_slots.push_back(int64_t(tables[s * max_blocks + p / kBlock]) * kBlock + p % kBlock);
        all_pos.push_back(p);
        if (p >= ctx[s] - fresh[s]) {
          positions.push_back(p);
          slots.push_back(all_slots.back());
        }
      }
      qsl.push_back(qsl.back() + fresh[s]);
    }
    const AttentionBatch everything{int64_t(all_pos.size()), 0, all_pos.data(), all_slots.data()};
    write_indexer_keys(cache, all.data(), everything);
  }

  AttentionBatch batch() const {
    return {int64_t(positions.size()),
            int(ctx.size()),
            positions.data(),
            slots.data(),
            qsl.data(),
            tables.data(),
            max_blocks};
  }
  int seq_of(int64_t t) const {
    return int(std::upper_bound(qsl.begin(), qsl.end(), int32_t(t)) - qsl.begin()) - 1;
  }
};

// I(t, j) in float64 over the keys as stored.
std::vector<double> reference_scores(const IndexerCache& c, DType dtype, int s, int pos,
                                     const float* q, const float* w, int heads, double scale) {
  std::vector<double> out(size_t(pos) + 1, 0.0);
  for (int j = 0; j <= pos; ++j)
    for (int h = 0; h < heads; ++h) {
      double d = 0;
      for (int i = 0; i < kDim; ++i)
        d += double(q[h * kDim + i]) * as_stored(dtype, c.keys[s][size_t(j) * kDim + i]);
      out[j] += double(w[h]) * std::max(d * scale, 0.0);
    }
  return out;
}

struct Inputs {
  std::vector<float> q, w;
};
Inputs random_inputs(int64_t T, int heads, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Inputs in{std::vector<float>(size_t(T * heads * kDim)), std::vector<float>(size_t(T * heads))};
  for (float& x : in.q) x = nd(rng);
  for (float& x : in.w) x = nd(rng);
  return in;
}

// Prefill chunks, whole prompts and decodes, with contexts below, at and above k.
const std::vector<int> kCtx = {5, 40, 17, 9, 23}, kFresh = {5, 1, 9, 1, 23};

void check_against_reference(DType dtype) {
  std::mt19937 rng(11 + int(dtype));
  IndexerCache c(dtype, kCtx, kFresh, rng);
  const int heads = 4, k = 9;
  const double scale = 1.0 / std::sqrt(double(kDim));
  const AttentionBatch b = c.batch();
  const Inputs in = random_inputs(b.num_tokens, heads, rng);
  std::vector<int32_t> got(size_t(b.num_tokens * k));
  ThreadPool pool(2);
  ThreadScratch scratch(pool.size());
  indexer_top_k(in.q.data(), in.w.data(), c.cache, b, heads, float(scale), k, got.data(), pool,
                scratch);
  int checked = 0;
  for (int64_t t = 0; t < b.num_tokens; ++t) {
    const int pos = b.positions[t];
    const std::vector<int32_t> mine(got.begin() + t * k, got.begin() + (t + 1) * k);
    if (pos + 1 <= k) {
      for (int i = 0; i < k; ++i) EXPECT_EQ(mine[i], i <= pos ? i : -1) << "token " << t;
      continue;
    }
    auto ref = reference_scores(c, dtype, c.seq_of(t), pos, in.q.data() + t * heads * kDim,
                                in.w.data() + t * heads, heads, scale);
    std::vector<int32_t> order(ref.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
    // A float64 near-tie at the boundary could fall either way in f32: not a check of the rule.
    if (ref[order[k - 1]] - ref[order[k]] < 1e-4 * (1 + std::fabs(ref[order[k - 1]]))) continue;
    std::vector<int32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(mine, want) << "token " << t << " at position " << pos;
    ++checked;
  }
  EXPECT_GE(checked, 20);  // of the 23 tokens with more keys than picks
}

TEST(LightningIndexer, PicksTheTopKeysOfAFloat64Reference) {
  check_against_reference(DType::F32);
  check_against_reference(DType::BF16);
}

// Equal scores keep the earliest keys.
TEST(LightningIndexer, TiesGoToTheEarlierKey) {
  std::mt19937 rng(5);
  IndexerCache c(DType::F32, {20}, {3}, rng, /*equal_keys=*/true);
  const AttentionBatch b = c.batch();
  const Inputs in = random_inputs(b.num_tokens, 2, rng);
  std::vector<int32_t> got(size_t(b.num_tokens * 6));
  ThreadPool pool(1);
  ThreadScratch scratch(pool.size());
  indexer_top_k(in.q.data(), in.w.data(), c.cache, b, 2, 0.25f, 6, got.data(), pool, scratch);
  for (int64_t t = 0; t < b.num_tokens; ++t)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(got[t * 6 + i], i);
}

// Each token's choice is one function of its query and keys: the same whether it is scored in
// a batch of many sequences or alone, on one thread or several.
TEST(LightningIndexer, ChoiceDoesNotDependOnTheBatchOrThreads) {
  std::mt19937 rng(9);
  IndexerCache c(DType::BF16, kCtx, kFresh, rng);
  const int heads = 3, k = 4;
  const AttentionBatch b = c.batch();
  const Inputs in = random_inputs(b.num_tokens, heads, rng);
  std::vector<int32_t> batched(size_t(b.num_tokens * k));
  ThreadPool pool3(3);
  ThreadScratch scratch3(pool3.size());
  indexer_top_k(in.q.data(), in.w.data(), c.cache, b, heads, 0.2f, k, batched.data(), pool3,
                scratch3);
  ThreadPool pool1(1);
  ThreadScratch scratch1(pool1.size());
  for (int64_t t = 0; t < b.num_tokens; ++t) {
    const int s = c.seq_of(t);
    const int32_t qsl[2] = {0, 1};
    const AttentionBatch one{1,
                             1,
                             &b.positions[t],
                             &b.slot_mapping[t],
                             qsl,
                             b.block_tables + s * b.max_blocks_per_seq,
                             b.max_blocks_per_seq};
    std::vector<int32_t> alone(static_cast<size_t>(k));
    indexer_top_k(in.q.data() + t * heads * kDim, in.w.data() + t * heads, c.cache, one, heads,
                  0.2f, k, alone.data(), pool1, scratch1);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + t * k)) << "token " << t;
  }
}

TEST(LightningIndexer, KeysSitAfterTheLatentAndRopeParts) {
  std::mt19937 rng(3);
  IndexerCache c(DType::BF16, {6}, {6}, rng);
  for (int p = 0; p < 6; ++p) {
    const int64_t slot = int64_t(c.tables[p / kBlock]) * kBlock + p % kBlock;
    const auto* row =
        reinterpret_cast<const uint16_t*>(c.storage.data()) + slot * (kLatent + kRope + kDim);
    for (int i = 0; i < kLatent + kRope; ++i) EXPECT_EQ(row[i], 0xFFFF) << "untouched " << i;
    for (int i = 0; i < kDim; ++i)
      EXPECT_EQ(row[kLatent + kRope + i], f32_to_bf16(c.keys[0][size_t(p) * kDim + i]));
  }
}

}  // namespace
}  // namespace kestrel::cpu
