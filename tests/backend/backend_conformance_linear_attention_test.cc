// Backend conformance of the linear-attention ops (causal_conv1d, gated_delta_rule,
// gated_rms_norm; backend/ops.h): on every ISA, against float64 references within each
// activation dtype's rounding, bit-identical between a 1-thread and a 2-thread backend and
// across ISAs, and a sequence's bits the same alone or batched with others, in one step or in
// chunks; the hold and draft-snapshot slots get the states of the runs that stop there, and a
// sequence at position 0 ignores what its slot held.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend_conformance.h"

namespace kestrel::conformance {
namespace {

class LinearAttentionConformance : public ConformanceTest {};

constexpr DType kActs[] = {DType::F32, DType::BF16, DType::F16};

// One piece of a batch: rows [begin, end) of logical sequence `seq`'s tokens, at positions from
// start + begin, in state slot `slot`.
struct Piece {
  int seq;
  int32_t begin, end, start, slot;
  int32_t hold = -1;
  int32_t snapshots = 0, snapshot_slot = -1;
};

// The batch's arrays and its view; with_extras: hold and snapshot arrays even where unused.
struct Batch {
  std::vector<int32_t> qsl{0}, positions, slots, holds, counts, snapshot_slots;
  bool extras = false;

  Batch(const std::vector<Piece>& pieces, bool with_extras) : extras(with_extras) {
    for (const Piece& p : pieces) {
      for (int32_t t = p.begin; t < p.end; ++t) positions.push_back(p.start + t);
      qsl.push_back(qsl.back() + p.end - p.begin);
      slots.push_back(p.slot);
      holds.push_back(p.hold);
      counts.push_back(p.snapshots);
      snapshot_slots.push_back(p.snapshot_slot);
    }
  }
  RecurrentBatch view() const {
    RecurrentBatch b;
    b.num_seqs = int(slots.size());
    b.query_start_loc = qsl.data();
    b.positions = positions.data();
    b.state_slots = slots.data();
    if (extras) {
      b.hold_slots = holds.data();
      b.snapshot_counts = counts.data();
      b.snapshot_slots = snapshot_slots.data();
    }
    return b;
  }
};

// Rows of `width` floats of the pieces' sequences, concatenated in batch order.
std::vector<float> gather(const std::vector<std::vector<float>>& rows_of, int64_t width,
                          const std::vector<Piece>& pieces) {
  std::vector<float> out;
  for (const Piece& p : pieces)
    out.insert(out.end(), rows_of[size_t(p.seq)].begin() + p.begin * width,
               rows_of[size_t(p.seq)].begin() + p.end * width);
  return out;
}

// ---- causal_conv1d ----

struct ConvCase {
  int64_t channels;
  int kernel;
  std::vector<float> weight;               // [channels, kernel]
  std::vector<std::vector<float>> inputs;  // per sequence [tokens, channels]
  std::vector<float> init;                 // slots × [channels, kernel − 1]

  int64_t taps() const { return kernel - 1; }
  int64_t slot_floats() const { return channels * taps(); }
};

ConvCase make_conv(int64_t channels, int kernel, std::vector<int32_t> lengths, int32_t slots,
                   std::mt19937& rng) {
  ConvCase c{channels, kernel, randn(size_t(channels * kernel), rng, 0.0f, 0.5f), {}, {}};
  for (const int32_t n : lengths) c.inputs.push_back(randn(size_t(n * channels), rng));
  c.init = randn(size_t(slots * c.slot_floats()), rng);
  return c;
}

struct ConvResult {
  std::vector<float> y, states;
};

ConvResult run_conv(Backend& be, const ConvCase& c, const std::vector<Piece>& pieces, DType act,
                    bool extras, std::vector<float> states) {
  const Batch b(pieces, extras);
  const std::vector<float> x = gather(c.inputs, c.channels, pieces);
  ConvResult r{std::vector<float>(x.size(), std::nanf("")), std::move(states)};
  const CausalConv1d conv{
      .x = x.data(),
      .weight = c.weight.data(),
      .channels = c.channels,
      .kernel = c.kernel,
      .y = r.y.data(),
      .states = {r.states.data(), c.slot_floats(), int32_t(r.states.size() / c.slot_floats())},
      .act = act};
  be.causal_conv1d(conv, b.view());
  return r;
}

// The float64 convolution and SiLU, per sequence from its slot's state (or zeros at position
// 0), with the bound the op must meet: the f32 conv (a product then kernel − 1 FMAs) errs by
// kernel·u·Σ|w·in|, rounding it to act by u_act of that, SiLU's slope is at most 1.1, and σ (expf),
// the product and the final rounding add 4u + u_act of the result.
TEST_F(LinearAttentionConformance, CausalConv1dMatchesFloat64) {
  std::mt19937 rng(31);
  for (const int kernel : {4, 3}) {
    const ConvCase c = make_conv(77, kernel, {9, 1, 14}, 4, rng);
    const std::vector<Piece> pieces = {{0, 0, 9, 0, 0}, {1, 0, 1, 5, 1}, {2, 0, 14, 3, 3}};
    for (const DType act : kActs) {
      std::vector<double> want, bound;
      for (const Piece& p : pieces) {
        const float* init = c.init.data() + p.slot * c.slot_floats();
        for (int32_t t = p.begin; t < p.end; ++t)
          for (int64_t ch = 0; ch < c.channels; ++ch) {
            double conv = 0, mag = 0;
            for (int i = 0; i < kernel; ++i) {
              const int64_t at = t - (kernel - 1) + i;  // input index in the sequence
              const double in = at >= 0 ? c.inputs[size_t(p.seq)][size_t(at * c.channels + ch)]
                                : p.start == 0 ? 0.0
                                               : init[ch * c.taps() + (c.taps() + at)];
              conv += c.weight[size_t(ch * kernel + i)] * in;
              mag += std::fabs(c.weight[size_t(ch * kernel + i)] * in);
            }
            const double y = conv / (1 + std::exp(-conv));
            want.push_back(y);
            bound.push_back(1.1 * (kernel * kU + unit(act)) * mag +
                            (4 * kU + unit(act)) * std::fabs(y) + 2.1 * tiny(act) + 1e-30);
          }
      }
      std::vector<std::vector<float>> per_isa;
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message() << "kernel " << kernel << " " << dtype_name(act));
        const ConvResult r1 = run_conv(*one, c, pieces, act, false, c.init);
        const ConvResult r2 = run_conv(*two, c, pieces, act, false, c.init);
        EXPECT_TRUE(same_bits(r1.y, r2.y));
        EXPECT_TRUE(same_bits(r1.states, r2.states));
        cpu::Mismatches bad;
        bad.check(r2.y, want, bound, "conv");
        EXPECT_EQ(bad.count, 0) << bad.first;
        EXPECT_TRUE(rounded_to(act, r2.y));
        // Each slot ends with its sequence's last kernel − 1 inputs; the unused slot is untouched.
        for (const Piece& p : pieces) {
          const int32_t n = p.end - p.begin;
          for (int64_t ch = 0; ch < c.channels; ++ch)
            for (int64_t i = 0; i < c.taps(); ++i) {
              const int64_t at = n - c.taps() + i;
              const float expect =
                  at >= 0 ? c.inputs[size_t(p.seq)][size_t(at * c.channels + ch)]
                  : p.start == 0
                      ? 0.0f
                      : c.init[size_t(p.slot * c.slot_floats() + ch * c.taps() + c.taps() + at)];
              EXPECT_EQ(r2.states[size_t(p.slot * c.slot_floats() + ch * c.taps() + i)], expect);
            }
        }
        EXPECT_TRUE(same_bits(r2.states.data() + 2 * c.slot_floats(),
                              c.init.data() + 2 * c.slot_floats(), size_t(c.slot_floats())));
        per_isa.push_back(r2.y);
      });
      for (size_t i = 1; i < per_isa.size(); ++i)
        EXPECT_TRUE(same_bits(per_isa[0], per_isa[i])) << "ISA " << i << " vs scalar";
    }
  }
}

// The same sequence alone, batched with others, and in chunks continuing from its slot: the
// same bits, outputs and state.
TEST_F(LinearAttentionConformance, CausalConv1dIsBatchAndChunkInvariant) {
  std::mt19937 rng(32);
  const ConvCase c = make_conv(77, 4, {17, 5, 3}, 4, rng);
  for_each_isa([&](const std::string&) {
    for (const DType act : {DType::F32, DType::BF16}) {
      const ConvResult alone = run_conv(*two, c, {{0, 0, 17, 2, 2}}, act, false, c.init);
      const ConvResult batched = run_conv(
          *two, c, {{1, 0, 5, 0, 0}, {0, 0, 17, 2, 2}, {2, 0, 3, 9, 1}}, act, false, c.init);
      EXPECT_TRUE(same_bits(alone.y.data(), batched.y.data() + 5 * c.channels, alone.y.size()));
      EXPECT_TRUE(same_bits(alone.states.data() + 2 * c.slot_floats(),
                            batched.states.data() + 2 * c.slot_floats(), size_t(c.slot_floats())));
      std::vector<float> chunked, states = c.init;
      for (const auto& [b, e] : {std::pair{0, 1}, {1, 7}, {7, 17}}) {
        ConvResult part = run_conv(*one, c, {{0, b, e, 2, 2}}, act, false, states);
        chunked.insert(chunked.end(), part.y.begin(), part.y.end());
        states = part.states;
      }
      EXPECT_TRUE(same_bits(alone.y, chunked)) << dtype_name(act);
      EXPECT_TRUE(same_bits(alone.states, states)) << dtype_name(act);
    }
  });
}

// A hold gets the state before the sequence's last token and snapshots the states after its
// last tokens but the final one: bit for bit the slots of runs that stop there. A sequence at
// position 0 starts from zeros whatever its slot held.
TEST_F(LinearAttentionConformance, CausalConv1dHoldsSnapshotsAndFreshStarts) {
  std::mt19937 rng(33);
  const ConvCase c = make_conv(77, 4, {11, 6}, 10, rng);
  for_each_isa([&](const std::string&) {
    // Sequence 0 holds into slot 5; sequence 1 keeps three snapshots in slots 6..8.
    const std::vector<Piece> pieces = {{0, 0, 11, 4, 0, 5}, {1, 0, 6, 2, 1, -1, 3, 6}};
    const ConvResult r = run_conv(*two, c, pieces, DType::F32, true, c.init);
    const int64_t f = c.slot_floats();
    // The hold: sequence 0's first 10 tokens alone.
    const ConvResult held = run_conv(*one, c, {{0, 0, 10, 4, 0}}, DType::F32, false, c.init);
    EXPECT_TRUE(same_bits(r.states.data() + 5 * f, held.states.data(), size_t(f)));
    // Snapshot i: the state after sequence 1's token 2 + i (3 + i tokens).
    for (int i = 0; i < 3; ++i) {
      const ConvResult upto = run_conv(*one, c, {{1, 0, 3 + i, 2, 1}}, DType::F32, false, c.init);
      EXPECT_TRUE(same_bits(r.states.data() + (6 + i) * f, upto.states.data() + f, size_t(f)))
          << "snapshot " << i;
    }
    // A one-token step holds the state it starts from.
    const ConvResult single =
        run_conv(*two, c, {{0, 10, 11, 4, 0, 5}}, DType::F32, true, held.states);
    EXPECT_TRUE(same_bits(single.states.data() + 5 * f, held.states.data(), size_t(f)));
    EXPECT_TRUE(same_bits(single.y.data(), r.y.data() + 10 * c.channels, size_t(c.channels)));
    // Position 0 ignores the slot: random or zero, the same bits.
    std::vector<float> zeros = c.init;
    std::fill_n(zeros.begin() + 4 * f, f, 0.0f);
    const ConvResult from_zeros = run_conv(*two, c, {{0, 0, 11, 0, 4}}, DType::F32, false, zeros);
    const ConvResult from_junk = run_conv(*two, c, {{0, 0, 11, 0, 4}}, DType::F32, false, c.init);
    EXPECT_TRUE(same_bits(from_zeros.y, from_junk.y));
    EXPECT_TRUE(same_bits(from_zeros.states, from_junk.states));
  });
}

// ---- gated_delta_rule ----

struct RuleCase {
  int key_heads, value_heads;
  int64_t dk, dv;
  std::vector<std::vector<float>> x;     // per sequence [tokens, stride]: [q | k | v]
  std::vector<std::vector<float>> b, a;  // per sequence [tokens, value_heads]
  std::vector<float> dt_bias, decay_rate;
  std::vector<float> init;  // slots × [value_heads, dk, dv]

  int64_t kd() const { return key_heads * dk; }
  int64_t stride() const { return 2 * kd() + value_heads * dv; }
  int64_t head() const { return dk * dv; }
  int64_t slot_floats() const { return value_heads * head(); }
};

RuleCase make_rule(int64_t dk, int64_t dv, std::vector<int32_t> lengths, int32_t slots,
                   std::mt19937& rng) {
  RuleCase c{2, 4, dk, dv, {}, {}, {}, {}, {}, {}};
  for (const int32_t n : lengths) {
    c.x.push_back(randn(size_t(n * c.stride()), rng));
    c.b.push_back(randn(size_t(n * c.value_heads), rng, 0.0f, 2.0f));
    c.a.push_back(randn(size_t(n * c.value_heads), rng, 0.0f, 2.0f));
  }
  c.dt_bias = randn(size_t(c.value_heads), rng);
  std::uniform_real_distribution<float> rate(-3.0f, -0.05f);
  for (int j = 0; j < c.value_heads; ++j) c.decay_rate.push_back(rate(rng));
  c.init = randn(size_t(slots * c.slot_floats()), rng, 0.0f, 0.3f);
  return c;
}

struct RuleResult {
  std::vector<float> out, states;
};

RuleResult run_rule(Backend& be, const RuleCase& c, const std::vector<Piece>& pieces, DType act,
                    bool extras, std::vector<float> states) {
  const Batch batch(pieces, extras);
  const std::vector<float> x = gather(c.x, c.stride(), pieces);
  const std::vector<float> b = gather(c.b, c.value_heads, pieces);
  const std::vector<float> a = gather(c.a, c.value_heads, pieces);
  const int64_t T = batch.qsl.back();
  RuleResult r{std::vector<float>(size_t(T * c.value_heads * c.dv), std::nanf("")),
               std::move(states)};
  const GatedDeltaRule rule{
      .q = x.data(),
      .k = x.data() + c.kd(),
      .v = x.data() + 2 * c.kd(),
      .stride = c.stride(),
      .b = b.data(),
      .a = a.data(),
      .dt_bias = c.dt_bias.data(),
      .decay_rate = c.decay_rate.data(),
      .key_heads = c.key_heads,
      .value_heads = c.value_heads,
      .key_dim = c.dk,
      .value_dim = c.dv,
      .out = r.out.data(),
      .states = {r.states.data(), c.slot_floats(), int32_t(r.states.size() / c.slot_floats())},
      .act = act};
  be.gated_delta_rule(rule, batch.view());
  return r;
}

// The recurrence in float64 as ops.h defines it; β is the f32 σ rounded to act, as the op
// specifies. Bounds: each token's f32 sums (key_dim FMAs) and updates err by about
// (key_dim + 4)·u of the state's magnitude, accumulating at most linearly over the tokens (the
// recurrence is a contraction: decays below 1, normed keys, β ≤ 1); outputs also round to act.
TEST_F(LinearAttentionConformance, GatedDeltaRuleMatchesFloat64) {
  std::mt19937 rng(34);
  for (const int64_t dv : {int64_t(128), int64_t(36)}) {
    const RuleCase c = make_rule(32, dv, {13, 1, 22}, 4, rng);
    const std::vector<Piece> pieces = {{0, 0, 13, 0, 0}, {1, 0, 1, 7, 1}, {2, 0, 22, 3, 3}};
    for (const DType act : kActs) {
      std::vector<double> want, bound;
      std::vector<std::vector<double>> final_states(4);
      std::vector<double> state_bound(4, 0.0);
      const int64_t nv = c.value_heads, rho = nv / c.key_heads, dk = c.dk;
      for (const Piece& p : pieces) {
        const int32_t n = p.end - p.begin;
        std::vector<double> out(size_t(n * nv * dv)), out_bound(out.size());
        std::vector<double>& fs = final_states[size_t(p.slot)];
        fs.assign(size_t(c.slot_floats()), 0.0);
        for (int64_t j = 0; j < nv; ++j) {
          std::vector<double> S(static_cast<size_t>(c.head()));
          for (int64_t i = 0; i < c.head(); ++i)
            S[size_t(i)] =
                p.start == 0 ? 0.0 : c.init[size_t(p.slot * c.slot_floats() + j * c.head() + i)];
          for (int32_t t = 0; t < n; ++t) {
            const float* xt = c.x[size_t(p.seq)].data() + t * c.stride();
            const float* qt = xt + (j / rho) * dk;
            const float* kt = xt + c.kd() + (j / rho) * dk;
            const float* vt = xt + 2 * c.kd() + j * dv;
            double qq = 0, kk = 0;
            for (int64_t i = 0; i < dk; ++i) {
              qq += double(qt[i]) * qt[i];
              kk += double(kt[i]) * kt[i];
            }
            std::vector<double> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk));
            for (int64_t i = 0; i < dk; ++i) {
              q[size_t(i)] = qt[i] / std::sqrt(qq + 1e-6) / std::sqrt(double(dk));
              k[size_t(i)] = kt[i] / std::sqrt(kk + 1e-6);
            }
            const float bt = c.b[size_t(p.seq)][size_t(t * nv + j)];
            const double beta = cpu::test::rounded(act, 1.0f / (1.0f + std::exp(-bt)));
            const double g = double(c.a[size_t(p.seq)][size_t(t * nv + j)]) + c.dt_bias[size_t(j)];
            const double alpha =
                std::exp(c.decay_rate[size_t(j)] * (g > 20 ? g : std::log1p(std::exp(g))));
            for (int64_t col = 0; col < dv; ++col) {
              double u = 0;
              for (int64_t r = 0; r < dk; ++r) u += alpha * S[size_t(r * dv + col)] * k[size_t(r)];
              u = beta * (vt[col] - u);
              double o = 0, mag = 0;
              for (int64_t r = 0; r < dk; ++r) {
                double& s = S[size_t(r * dv + col)];
                s = alpha * s + k[size_t(r)] * u;
                o += s * q[size_t(r)];
                mag += std::fabs(s * q[size_t(r)]);
              }
              out[size_t((t * nv + j) * dv + col)] = o;
              out_bound[size_t((t * nv + j) * dv + col)] = 4.0 * (dk + 4) * (t + 1) * kU * mag +
                                                           unit(act) * std::fabs(o) + tiny(act) +
                                                           1e-30;
            }
          }
          double smax = 0;
          for (int64_t i = 0; i < c.head(); ++i) {
            fs[size_t(j * c.head() + i)] = S[size_t(i)];
            smax = std::max(smax, std::fabs(S[size_t(i)]));
          }
          state_bound[size_t(p.slot)] =
              std::max(state_bound[size_t(p.slot)], 4.0 * (dk + 4) * n * kU * smax);
        }
        want.insert(want.end(), out.begin(), out.end());
        bound.insert(bound.end(), out_bound.begin(), out_bound.end());
      }
      std::vector<std::vector<float>> per_isa;
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message() << "dv " << dv << " " << dtype_name(act));
        const RuleResult r1 = run_rule(*one, c, pieces, act, false, c.init);
        const RuleResult r2 = run_rule(*two, c, pieces, act, false, c.init);
        EXPECT_TRUE(same_bits(r1.out, r2.out));
        EXPECT_TRUE(same_bits(r1.states, r2.states));
        cpu::Mismatches bad;
        bad.check(r2.out, want, bound, "output");
        EXPECT_EQ(bad.count, 0) << bad.first;
        EXPECT_TRUE(rounded_to(act, r2.out));
        for (const Piece& p : pieces) {
          const float* got = r2.states.data() + p.slot * c.slot_floats();
          double worst = 0;
          for (int64_t i = 0; i < c.slot_floats(); ++i)
            worst = std::max(worst, std::fabs(got[i] - final_states[size_t(p.slot)][size_t(i)]));
          EXPECT_LE(worst, state_bound[size_t(p.slot)]) << "slot " << p.slot;
        }
        EXPECT_TRUE(same_bits(r2.states.data() + 2 * c.slot_floats(),
                              c.init.data() + 2 * c.slot_floats(), size_t(c.slot_floats())));
        per_isa.push_back(r2.out);
      });
      for (size_t i = 1; i < per_isa.size(); ++i)
        EXPECT_TRUE(same_bits(per_isa[0], per_isa[i])) << "ISA " << i << " vs scalar";
    }
  }
}

TEST_F(LinearAttentionConformance, GatedDeltaRuleIsBatchAndChunkInvariant) {
  std::mt19937 rng(35);
  const RuleCase c = make_rule(32, 36, {17, 5, 3}, 4, rng);
  for_each_isa([&](const std::string&) {
    for (const DType act : {DType::F32, DType::BF16}) {
      const RuleResult alone = run_rule(*two, c, {{0, 0, 17, 2, 2}}, act, false, c.init);
      const RuleResult batched = run_rule(
          *two, c, {{1, 0, 5, 0, 0}, {0, 0, 17, 2, 2}, {2, 0, 3, 9, 1}}, act, false, c.init);
      const int64_t row = c.value_heads * c.dv;
      EXPECT_TRUE(same_bits(alone.out.data(), batched.out.data() + 5 * row, alone.out.size()));
      EXPECT_TRUE(same_bits(alone.states.data() + 2 * c.slot_floats(),
                            batched.states.data() + 2 * c.slot_floats(), size_t(c.slot_floats())));
      std::vector<float> chunked, states = c.init;
      for (const auto& [b, e] : {std::pair{0, 1}, {1, 7}, {7, 17}}) {
        RuleResult part = run_rule(*one, c, {{0, b, e, 2, 2}}, act, false, states);
        chunked.insert(chunked.end(), part.out.begin(), part.out.end());
        states = part.states;
      }
      EXPECT_TRUE(same_bits(alone.out, chunked)) << dtype_name(act);
      EXPECT_TRUE(same_bits(alone.states, states)) << dtype_name(act);
    }
  });
}

TEST_F(LinearAttentionConformance, GatedDeltaRuleHoldsSnapshotsAndFreshStarts) {
  std::mt19937 rng(36);
  const RuleCase c = make_rule(32, 36, {11, 6}, 10, rng);
  const int64_t f = c.slot_floats(), row = c.value_heads * c.dv;
  for_each_isa([&](const std::string&) {
    const std::vector<Piece> pieces = {{0, 0, 11, 4, 0, 5}, {1, 0, 6, 2, 1, -1, 3, 6}};
    const RuleResult r = run_rule(*two, c, pieces, DType::F32, true, c.init);
    const RuleResult held = run_rule(*one, c, {{0, 0, 10, 4, 0}}, DType::F32, false, c.init);
    EXPECT_TRUE(same_bits(r.states.data() + 5 * f, held.states.data(), size_t(f)));
    for (int i = 0; i < 3; ++i) {
      const RuleResult upto = run_rule(*one, c, {{1, 0, 3 + i, 2, 1}}, DType::F32, false, c.init);
      EXPECT_TRUE(same_bits(r.states.data() + (6 + i) * f, upto.states.data() + f, size_t(f)))
          << "snapshot " << i;
    }
    const RuleResult single =
        run_rule(*two, c, {{0, 10, 11, 4, 0, 5}}, DType::F32, true, held.states);
    EXPECT_TRUE(same_bits(single.states.data() + 5 * f, held.states.data(), size_t(f)));
    EXPECT_TRUE(same_bits(single.out.data(), r.out.data() + 10 * row, size_t(row)));
    std::vector<float> zeros = c.init;
    std::fill_n(zeros.begin() + 4 * f, f, 0.0f);
    const RuleResult from_zeros = run_rule(*two, c, {{0, 0, 11, 0, 4}}, DType::F32, false, zeros);
    const RuleResult from_junk = run_rule(*two, c, {{0, 0, 11, 0, 4}}, DType::F32, false, c.init);
    EXPECT_TRUE(same_bits(from_zeros.out, from_junk.out));
    EXPECT_TRUE(same_bits(from_zeros.states, from_junk.states));
  });
}

// ---- gated_rms_norm ----

// Every step is a product rounded once to act (and f32): the result is within (3·u_act + 8u)
// of the float64 value relative to itself (σ through expf a few ulps, the f64 scale one f32
// rounding), plus f16's subnormal half steps, the earlier ones scaled by |silu(z)|.
TEST_F(LinearAttentionConformance, GatedRmsNorm) {
  std::mt19937 rng(37);
  const int64_t rows = 67;
  const float eps = 1e-6f;
  for (const int64_t dim : {int64_t(128), int64_t(37)}) {
    const std::vector<float> x = randn(size_t(rows * dim), rng, 0.0f, 2.0f);
    const std::vector<float> z = randn(x.size(), rng, 0.0f, 3.0f);
    const std::vector<float> w = randn(size_t(dim), rng, 1.0f, 0.3f);
    std::vector<double> want(x.size()), gate(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i)
        ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
      const double s = 1 / std::sqrt(ss / double(dim) + double(eps));
      for (int64_t i = 0; i < dim; ++i) {
        const double g = z[size_t(r * dim + i)], silu = g / (1 + std::exp(-g));
        gate[size_t(r * dim + i)] = std::fabs(silu);
        want[size_t(r * dim + i)] = x[size_t(r * dim + i)] * s * w[size_t(i)] * silu;
      }
    }
    for (const DType act : kActs) {
      for_each_isa([&](const std::string&) {
        SCOPED_TRACE(testing::Message() << "dim " << dim << " " << dtype_name(act));
        std::vector<float> g1 = x, g2 = x;
        one->gated_rms_norm(g1.data(), z.data(), w.data(), eps, rows, dim, act);
        two->gated_rms_norm(g2.data(), z.data(), w.data(), eps, rows, dim, act);
        EXPECT_TRUE(same_bits(g1, g2));
        std::vector<double> bound(want.size());
        for (size_t i = 0; i < want.size(); ++i)
          bound[i] =
              (3 * unit(act) + 8 * kU) * std::fabs(want[i]) + 4 * (1 + gate[i]) * tiny(act) + 1e-30;
        cpu::Mismatches bad;
        bad.check(g2, want, bound, "gated_rms_norm");
        EXPECT_EQ(bad.count, 0) << bad.first;
        EXPECT_TRUE(rounded_to(act, g2));
      });
    }
  }
}

}  // namespace
}  // namespace kestrel::conformance
