// Paged attention against a float64 dense reference, with scattered block tables, several
// sequences of different lengths (prefill chunks and decodes mixed) and GQA; the rounding of
// f16/bf16 caches and bf16 activations; batch invariance.
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/attention_reference.h"
#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

struct Case {
  int heads, kv_heads, head_dim, block_size;
  std::vector<int> ctx_lens;  // total context of each sequence after this step
  std::vector<int> new_lens;  // tokens of each sequence in this step (≤ ctx)
  int window = 0;             // > 0: sliding-window attention
  bool sinks = false;         // a sink logit per head (DeepSeek-V4)
};

void run_case(const Case& c, int threads) {
  std::mt19937 rng(1234 + c.head_dim);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int S = int(c.ctx_lens.size());
  const int hd = c.head_dim, kvh = c.kv_heads, nh = c.heads;
  int max_blocks = 0, total_blocks = 0;
  for (int L : c.ctx_lens) {
    const int b = (L + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, b);
    total_blocks += b;
  }
  // A shuffled block assignment so sequences interleave in the pool.
  std::vector<int32_t> perm(total_blocks + 3);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(S * max_blocks, -1);
  int next = 0;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < (c.ctx_lens[s] + c.block_size - 1) / c.block_size; ++b)
      tables[s * max_blocks + b] = perm[next++];

  const int64_t nblocks = int64_t(perm.size());
  const int64_t row = int64_t(kvh) * hd;
  std::vector<float> kc(nblocks * c.block_size * row), vc(kc.size());
  for (auto& x : kc) x = nd(rng);
  for (auto& x : vc) x = nd(rng);
  KVLayer layer{kc.data(), vc.data(), DType::F32, nblocks, c.block_size, kvh, hd};

  // Dense per-sequence K/V (f64) for the reference; the old tokens are placed in the cache
  // directly, the new ones through write_kv.
  std::vector<std::vector<double>> K(S), Vd(S);
  std::vector<int32_t> positions, qsl{0};
  std::vector<int64_t> slots;
  std::vector<float> knew, vnew;
  for (int s = 0; s < S; ++s) {
    K[s].resize(size_t(c.ctx_lens[s]) * row);
    Vd[s].resize(K[s].size());
    for (int p = 0; p < c.ctx_lens[s]; ++p) {
      const int64_t slot =
          int64_t(tables[s * max_blocks + p / c.block_size]) * c.block_size + p % c.block_size;
      const bool is_new = p >= c.ctx_lens[s] - c.new_lens[s];
      for (int64_t i = 0; i < row; ++i) {
        float kv = nd(rng), vv = nd(rng);
        if (!is_new) {
          const int64_t at = kv_row_index(layer, slot, int(i / hd)) * hd + i % hd;
          kc[at] = kv;
          vc[at] = vv;
        } else {
          knew.push_back(kv);
          vnew.push_back(vv);
        }
        K[s][p * row + i] = kv;
        Vd[s][p * row + i] = vv;
      }
      if (is_new) {
        positions.push_back(p);
        slots.push_back(slot);
      }
    }
    qsl.push_back(qsl.back() + c.new_lens[s]);
  }
  const int64_t T = int64_t(positions.size());
  AttentionBatch batch{T, S, positions.data(), slots.data(), qsl.data(), tables.data(), max_blocks};
  batch.sliding_window = c.window;
  write_kv(layer, knew.data(), vnew.data(), batch);
  // The first key any query of a sequence sees; blocks wholly before it move to a block of NaN,
  // as a freed block would be: an output that read one would not be finite.
  auto first_key = [&](int pos) { return c.window > 0 ? std::max(0, pos - c.window + 1) : 0; };
  if (c.window > 0) {
    const int32_t poison = perm.back();  // never handed to a sequence
    std::fill(kc.begin() + poison * c.block_size * row,
              kc.begin() + (poison + 1) * c.block_size * row, std::nanf(""));
    std::fill(vc.begin() + poison * c.block_size * row,
              vc.begin() + (poison + 1) * c.block_size * row, std::nanf(""));
    for (int s = 0; s < S; ++s)
      for (int b = 0; b < first_key(c.ctx_lens[s] - c.new_lens[s]) / c.block_size; ++b)
        tables[s * max_blocks + b] = poison;
  }

  std::vector<float> q(T * nh * hd), out(q.size()), sinks(static_cast<size_t>(nh));
  for (auto& x : q) x = nd(rng);
  for (auto& x : sinks) x = 2.0f * nd(rng);
  if (c.sinks) batch.sinks = sinks.data();
  const float scale = 1.0f / std::sqrt(float(hd));
  ThreadPool pool(threads);
  paged_attention(q.data(), layer, batch, nh, scale, out.data(), pool);

  for (int s = 0; s < S; ++s) {
    for (int32_t t = qsl[s]; t < qsl[s + 1]; ++t) {
      for (int h = 0; h < nh; ++h) {
        const int g = h / (nh / kvh);
        const int pos = positions[t], lo = first_key(pos);
        std::vector<double> sc(pos + 1 - lo);
        double mx = -1e300;
        for (int j = lo; j <= pos; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += double(q[(t * nh + h) * hd + i]) * K[s][j * row + g * hd + i];
          sc[j - lo] = d * scale;
          mx = std::max(mx, sc[j - lo]);
        }
        if (c.sinks) mx = std::max(mx, double(sinks[h]));
        double sum = c.sinks ? std::exp(double(sinks[h]) - mx) : 0.0;
        for (auto& v : sc) sum += (v = std::exp(v - mx));
        for (int i = 0; i < hd; ++i) {
          double ref = 0;
          for (int j = lo; j <= pos; ++j) ref += sc[j - lo] / sum * Vd[s][j * row + g * hd + i];
          EXPECT_NEAR(out[(t * nh + h) * hd + i], ref, 2e-5 * (1 + std::fabs(ref)))
              << "seq " << s << " token " << t << " head " << h << " dim " << i;
        }
      }
    }
  }
}

TEST(PagedAttention, MixedPrefillAndDecodeGqa) {
  run_case({4, 2, 16, 16, {5, 40, 17, 1}, {5, 1, 9, 1}}, 1);
}

TEST(PagedAttention, OddHeadDimSmallBlocksManyThreads) {
  run_case({6, 3, 24, 4, {13, 2, 31}, {13, 2, 1}}, 3);
}

TEST(PagedAttention, MultiQueryAttention) {
  run_case({8, 1, 32, 16, {70, 3}, {2, 3}}, 2);
}

// Long contexts against the reference: hundreds of key blocks, queries deep into them, and a
// window of 300 keys over 20 and more cache blocks.
TEST(PagedAttention, LongContexts) {
  run_case({4, 2, 16, 16, {600, 300, 257}, {3, 45, 1}}, 2);
  run_case({4, 2, 24, 16, {700, 520}, {2, 9}, 300}, 2);
}

// Windows shorter and longer than a block, crossed by prefill chunks and decodes; blocks before
// every window hold NaN.
// DeepSeek-V4: one shared KV head, a window, and a sink per head that takes probability without
// contributing a value (its softmax denominator grows; the weights sum to less than one).
TEST(PagedAttention, SinksTakeProbabilityWithoutAValue) {
  run_case({4, 1, 32, 8, {9, 30, 21}, {9, 1, 5}, 6, true}, 2);
  run_case({6, 2, 24, 4, {17, 3}, {17, 3}, 0, true}, 3);
}

TEST(PagedAttention, SlidingWindowReadsOnlyTheWindow) {
  run_case({4, 2, 16, 4, {5, 40, 17, 1, 29}, {5, 1, 9, 1, 3}, 6}, 2);
  run_case({6, 3, 24, 16, {70, 33, 90}, {2, 33, 1}, 21}, 3);
  run_case({4, 4, 8, 8, {12, 12}, {1, 12}, 1}, 1);
}

}  // namespace
}  // namespace kestrel::cpu

namespace kestrel::cpu {
namespace {

using test::AttentionRounding;

// A prefill (scattered blocks, GQA) with q, K and V as a model in `act` gives them, against the
// float64 reference that rounds where paged_attention.h says (cache `cache`, activations `act`):
// every output lies within the bounds the remaining f32 arithmetic allows, and those bounds are
// tight enough to tell each rounding step apart — a kernel that skipped one of the steps in
// `dropped` would put a good share of the outputs outside them.
void check_rounding(DType cache, DType act, const std::vector<AttentionRounding>& dropped) {
  const int nh = 4, kvh = 2, hd = 32, bs = 16, len = 45;
  std::mt19937 rng(99 + int(cache) * 7 + int(act));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(len * kvh * hd), v(k.size()), q(len * nh * hd), out(q.size());
  for (auto& x : k) x = test::rounded(act, nd(rng));
  for (auto& x : v) x = test::rounded(act, nd(rng));
  for (auto& x : q) x = test::rounded(act, nd(rng));
  std::vector<uint8_t> kc(size_t(4 * bs * kvh * hd) * 4), vc(kc.size());
  KVLayer layer{kc.data(), vc.data(), cache, 4, bs, kvh, hd};
  std::vector<int32_t> positions(len), table = {2, 0, 3}, qsl = {0, len};
  std::vector<int64_t> slots(len);
  for (int i = 0; i < len; ++i) {
    positions[i] = i;
    slots[i] = int64_t(table[i / bs]) * bs + i % bs;
  }
  AttentionBatch batch{len, 1, positions.data(), slots.data(), qsl.data(), table.data(), 3};
  write_kv(layer, k.data(), v.data(), batch);
  const float scale = 0.3f;  // not a power of two: the scaled scores round on their own
  ThreadPool pool(2);
  paged_attention(q.data(), layer, batch, nh, scale, out.data(), pool, act);

  // K and V as the kernel reads them from the cache.
  std::vector<float> kr(k.size()), vr(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    kr[i] = test::rounded(cache, k[i]);
    vr[i] = test::rounded(cache, v[i]);
  }
  test::RoundingCheck check(test::specified_rounding(cache, act), dropped);
  for (int t = 0; t < len; ++t) {
    for (int h = 0; h < nh; ++h) {
      const int g = h / (nh / kvh);
      std::vector<const float*> keys, values;
      for (int j = 0; j <= t; ++j) {
        keys.push_back(&kr[(j * kvh + g) * hd]);
        values.push_back(&vr[(j * kvh + g) * hd]);
      }
      check.row(&q[(t * nh + h) * hd], hd, keys, values, hd, scale, &out[(t * nh + h) * hd],
                "token " + std::to_string(t) + " head " + std::to_string(h));
    }
  }
  check.finish();
}

// bf16 activations on an f32 cache: scores, scaled scores, probabilities and output in bf16.
TEST(PagedAttention, Bf16ActivationsRoundWhereSpecified) {
  const AttentionRounding spec = test::specified_rounding(DType::F32, DType::BF16);
  AttentionRounding unrounded_probs = spec, unrounded_scores = spec;
  unrounded_probs.probs = DType::F32;
  unrounded_scores.scores = DType::F32;
  check_rounding(DType::F32, DType::BF16, {unrounded_probs, unrounded_scores});
}

// A bf16 cache with f32 activations: q and the probabilities are the bf16 operands of the two
// products, nothing else is rounded.
TEST(PagedAttention, Bf16CacheRoundsTheOperands) {
  const AttentionRounding spec = test::specified_rounding(DType::BF16, DType::F32);
  AttentionRounding unrounded_q = spec, unrounded_probs = spec;
  unrounded_q.q = DType::F32;
  unrounded_probs.probs = DType::F32;
  check_rounding(DType::BF16, DType::F32, {unrounded_q, unrounded_probs});
}

// A bf16 model with a bf16 cache (its default), q already bf16.
TEST(PagedAttention, Bf16CacheAndActivationsRoundWhereSpecified) {
  const AttentionRounding spec = test::specified_rounding(DType::BF16, DType::BF16);
  AttentionRounding unrounded_probs = spec, unrounded_scores = spec;
  unrounded_probs.probs = DType::F32;
  unrounded_scores.scores = DType::F32;
  check_rounding(DType::BF16, DType::BF16, {unrounded_probs, unrounded_scores});
}

// An f16 cache stores K/V as f16 bits and computes with f16 operands: the result equals an f64
// reference over the f16-rounded q, K, V and probabilities (f32 accumulation aside).
TEST(PagedAttention, F16CacheMatchesReferenceOverRoundedOperands) {
  const int nh = 2, kvh = 1, hd = 8, bs = 4, len = 11;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> kc(4 * bs * kvh * hd), vc(kc.size());
  std::vector<float> k(len * kvh * hd), v(k.size()), q(len * nh * hd), out(q.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  KVLayer layer{kc.data(), vc.data(), DType::F16, 4, bs, kvh, hd};
  std::vector<int32_t> positions(len), table = {3, 1, 0}, qsl = {0, len};
  std::vector<int64_t> slots(len);
  for (int i = 0; i < len; ++i) {
    positions[i] = i;
    slots[i] = int64_t(table[i / bs]) * bs + i % bs;
  }
  AttentionBatch batch{len, 1, positions.data(), slots.data(), qsl.data(), table.data(), 3};
  write_kv(layer, k.data(), v.data(), batch);
  for (int i = 0; i < len; ++i)
    for (int d = 0; d < hd; ++d) EXPECT_EQ(kc[slots[i] * hd + d], f32_to_f16(k[i * hd + d]));
  ThreadPool pool(1);
  paged_attention(q.data(), layer, batch, nh, 0.35f, out.data(), pool);
  auto h = [](double x) { return double(f16_to_f32(f32_to_f16(float(x)))); };
  for (int t = 0; t < len; ++t) {
    for (int hh = 0; hh < nh; ++hh) {
      std::vector<double> sc(t + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += h(q[(t * nh + hh) * hd + d]) * h(k[j * hd + d]);
        sc[j] = dot * 0.35;
        mx = std::max(mx, sc[j]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int d = 0; d < hd; ++d) {
        double ref = 0;
        for (int j = 0; j <= t; ++j) ref += h(sc[j] / sum) * h(v[j * hd + d]);
        EXPECT_NEAR(out[(t * nh + hh) * hd + d], ref, 1e-5 * (1 + std::fabs(ref)));
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu

namespace kestrel::cpu {
namespace {

// Batch invariance: a token's output is bit-identical whether it is computed inside a prefill
// chunk (query tiles, other sequences in the batch, several threads) or alone as a decode step.
void check_batch_invariance(DType cache_dtype, DType act, int threads, int window = 0) {
  const int nh = 6, kvh = 2, hd = 40, bs = 16, len = 45;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t row = int64_t(kvh) * hd;
  const int64_t nblocks = 8;
  std::vector<float> k(len * row), v(k.size()), q(len * nh * hd);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  std::vector<uint8_t> kc(size_t(nblocks * bs * row) * 4), vc(kc.size());
  KVLayer layer{kc.data(), vc.data(), cache_dtype, nblocks, bs, kvh, hd};
  std::vector<int32_t> table = {5, 1, 6}, positions(len), qsl = {0, len};
  std::vector<int64_t> slots(len);
  for (int i = 0; i < len; ++i) {
    positions[i] = i;
    slots[i] = int64_t(table[i / bs]) * bs + i % bs;
  }
  AttentionBatch prefill{len, 1, positions.data(), slots.data(), qsl.data(), table.data(), 3};
  prefill.sliding_window = window;
  write_kv(layer, k.data(), v.data(), prefill);
  ThreadPool pool(threads);
  std::vector<float> batched(q.size());
  paged_attention(q.data(), layer, prefill, nh, 0.2f, batched.data(), pool, act);

  ThreadPool one(1);
  for (int t = 0; t < len; ++t) {
    const int32_t pos = positions[t];
    const int32_t one_qsl[2] = {0, 1};
    AttentionBatch decode{1, 1, &pos, &slots[t], one_qsl, table.data(), 3};
    decode.sliding_window = window;
    std::vector<float> alone(nh * hd);
    paged_attention(q.data() + t * nh * hd, layer, decode, nh, 0.2f, alone.data(), one, act);
    for (int i = 0; i < nh * hd; ++i)
      ASSERT_EQ(f32_to_bits(alone[i]), f32_to_bits(batched[t * nh * hd + i]))
          << "token " << t << " element " << i;
  }
}

// K rotated on its way into the cache gives the same cache bytes as rotating K first; V and the
// caller's k stay as they were.
TEST(PagedAttention, WriteKvWithRopeEqualsRopeThenWrite) {
  const int kvh = 2, hd = 12, bs = 4, len = 7;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(len * kvh * hd), v(k.size()), inv_freq(5);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -float(i) / 5.0f);
  std::vector<int32_t> positions(len), table = {2, 0}, qsl = {0, len};
  std::vector<int64_t> slots(len);
  for (int i = 0; i < len; ++i) {
    positions[i] = 3 + 2 * i;
    slots[i] = int64_t(table[i / bs]) * bs + i % bs;
  }
  const AttentionBatch batch{len, 1, positions.data(), slots.data(), qsl.data(), table.data(), 2};
  for (DType dt : {DType::F32, DType::F16}) {
    for (bool interleaved : {false, true}) {
      const RopeParams rope{inv_freq.data(), 10, 1.0f, interleaved, DType::F32};
      const size_t elems = size_t(3) * bs * kvh * hd, bytes = elems * (dt == DType::F32 ? 4 : 2);
      std::vector<uint8_t> fk(bytes), fv(bytes), sk(bytes), sv(bytes);
      const std::vector<float> k0 = k;
      write_kv(KVLayer{fk.data(), fv.data(), dt, 3, bs, kvh, hd}, k.data(), v.data(), batch, &rope);
      EXPECT_EQ(k, k0);
      std::vector<float> rotated = k;
      apply_rope(rotated.data(), len, kvh, hd, positions.data(), rope);
      write_kv(KVLayer{sk.data(), sv.data(), dt, 3, bs, kvh, hd}, rotated.data(), v.data(), batch);
      EXPECT_EQ(fk, sk) << dtype_name(dt) << " interleaved " << interleaved;
      EXPECT_EQ(fv, sv) << dtype_name(dt);
    }
  }
}

// The AVX-512 block kernels give the AVX2 kernels' bits (attention_kernels.h), over head dims
// that fill whole, half and no AVX-512 registers, each cache dtype, and a sliding window.
void check_isas_agree(int hd, DType cache_dtype, DType act, int window) {
  const int nh = 4, kvh = 2, bs = 16, len = 37;
  std::mt19937 rng(uint32_t(hd) * 31 + uint32_t(window));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t row = int64_t(kvh) * hd;
  std::vector<float> k(len * row), v(k.size()), q(len * nh * hd);
  for (auto* vec : {&k, &v, &q})
    for (auto& x : *vec) x = nd(rng);
  std::vector<uint8_t> kc(size_t(4 * bs * row) * 4), vc(kc.size());
  const KVLayer layer{kc.data(), vc.data(), cache_dtype, 4, bs, kvh, hd};
  std::vector<int32_t> table = {3, 0, 2}, positions(len), qsl = {0, len};
  std::vector<int64_t> slots(len);
  for (int i = 0; i < len; ++i) {
    positions[i] = i;
    slots[i] = int64_t(table[i / bs]) * bs + i % bs;
  }
  AttentionBatch batch{len, 1, positions.data(), slots.data(), qsl.data(), table.data(), 3};
  batch.sliding_window = window;
  write_kv(layer, k.data(), v.data(), batch);
  ThreadPool pool(2);
  std::vector<float> wide(q.size()), narrow(q.size());
  set_linear_isa("auto");
  paged_attention(q.data(), layer, batch, nh, 0.3f, wide.data(), pool, act);
  set_linear_isa("avx2");
  paged_attention(q.data(), layer, batch, nh, 0.3f, narrow.data(), pool, act);
  set_linear_isa("auto");
  for (size_t i = 0; i < wide.size(); ++i)
    ASSERT_EQ(f32_to_bits(wide[i]), f32_to_bits(narrow[i]))
        << "hd " << hd << " " << dtype_name(cache_dtype) << " window " << window << " element "
        << i;
}

TEST(PagedAttention, IsasGiveTheSameBits) {
  if (std::string(linear_isa()) != "avx512") GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int hd : {8, 40, 64, 72, 128})
    for (DType cache : {DType::F32, DType::F16, DType::BF16})
      for (int window : {0, 9})
        check_isas_agree(hd, cache, cache == DType::BF16 ? cache : DType::F32, window);
}

TEST(PagedAttention, BatchInvariantF32) {
  check_batch_invariance(DType::F32, DType::F32, 2);
}
TEST(PagedAttention, BatchInvariantF16Cache) {
  check_batch_invariance(DType::F16, DType::F32, 3);
}
TEST(PagedAttention, BatchInvariantBf16CacheAndActivations) {
  check_batch_invariance(DType::BF16, DType::BF16, 2);
}
TEST(PagedAttention, BatchInvariantSlidingWindow) {
  check_batch_invariance(DType::F32, DType::F32, 2, 11);
  check_batch_invariance(DType::BF16, DType::BF16, 3, 20);
}

}  // namespace
}  // namespace kestrel::cpu
