#include "backend/cpu/gated_deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gated_deltanet_kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// The kernels of the ISA linear() runs (KESTREL_CPU_ISA caps both); the same bits on each.
const GatedDeltaNetKernels& kernels() {
  if (std::strcmp(linear_isa(), "scalar") == 0) return scalar_gated_deltanet_kernels();
  const GatedDeltaNetKernels* k512 = avx512_gated_deltanet_kernels();
  if (k512 != nullptr && avx512_selected()) return *k512;
  return avx2_gated_deltanet_kernels();
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// torch's softplus (beta 1, threshold 20).
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Channels the convolution's threads take at a time: whole AVX-512 vectors, so a channel's path
// does not depend on the split.
constexpr int64_t kConvUnit = 16;

// Checks a batch's slots against `states` before any kernel writes through them.
void check_slots(const RecurrentBatch& b, const StateSlots& states) {
  auto valid = [&](int32_t slot) { return slot >= 0 && slot < states.num_slots; };
  for (int s = 0; s < b.num_seqs; ++s) {
    KCHECK(valid(b.state_slots[s]), "state slot {} of {}", b.state_slots[s], states.num_slots);
    if (b.hold_slots != nullptr && b.hold_slots[s] >= 0)
      KCHECK(valid(b.hold_slots[s]), "hold slot {} of {}", b.hold_slots[s], states.num_slots);
    const int32_t n = b.snapshot_counts != nullptr ? b.snapshot_counts[s] : 0;
    const int32_t tokens = b.query_start_loc[s + 1] - b.query_start_loc[s];
    KCHECK(n >= 0 && n < std::max(tokens, 1), "{} snapshots of a sequence of {} tokens", n, tokens);
    if (n > 0)
      KCHECK(valid(b.snapshot_slots[s]) && valid(b.snapshot_slots[s] + n - 1),
             "snapshot slots {}..{} of {}", b.snapshot_slots[s], b.snapshot_slots[s] + n - 1,
             states.num_slots);
  }
}

// Sequence s's states offset by `offset` floats into each slot (its channels or head).
SequenceStates sequence_states(const RecurrentBatch& b, const StateSlots& states, int s,
                               int64_t offset) {
  const int32_t tokens = b.query_start_loc[s + 1] - b.query_start_loc[s];
  const int32_t n = b.snapshot_counts != nullptr ? b.snapshot_counts[s] : 0;
  const bool hold = b.hold_slots != nullptr && b.hold_slots[s] >= 0;
  return SequenceStates{states.at(b.state_slots[s]) + offset,
                        hold ? states.at(b.hold_slots[s]) + offset : nullptr,
                        n > 0 ? states.at(b.snapshot_slots[s]) + offset : nullptr,
                        states.slot_stride,
                        tokens - 1 - n,
                        tokens};
}

bool starts_fresh(const RecurrentBatch& b, int s) {
  return b.positions[b.query_start_loc[s]] == 0;
}

// A thread's normed queries and keys of one (sequence, key head): the value heads reading that
// key head reuse them.
struct NormedQueriesKeys {
  std::vector<float> qk;  // per token [q | k], key_dim each
};

// x / sqrt(Σx² + 1e-6) in f32, the sum one FMA chain in index order.
void l2_normed(const float* x, int64_t n, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = std::fma(x[i], x[i], ss);
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

void causal_conv1d(const CausalConv1d& p, const RecurrentBatch& b, ThreadPool& pool) {
  KCHECK(p.kernel >= 2 && p.kernel <= kMaxConvKernel, "causal_conv1d: {} taps (2 to {})", p.kernel,
         kMaxConvKernel);
  check_slots(b, p.states);
  const GatedDeltaNetKernels& k = kernels();
  const int64_t cd = p.channels, taps = p.kernel - 1;
  const int64_t tokens = b.query_start_loc[b.num_seqs];
  pool.parallel_for((cd + kConvUnit - 1) / kConvUnit, 4, [&](int64_t u0, int64_t u1) {
    const int64_t c0 = u0 * kConvUnit, c1 = std::min(cd, u1 * kConvUnit);
    for (int s = 0; s < b.num_seqs; ++s) {
      const int32_t first = b.query_start_loc[s];
      if (first == b.query_start_loc[s + 1]) continue;
      const SequenceStates st = sequence_states(b, p.states, s, c0 * taps);
      if (starts_fresh(b, s)) std::fill_n(st.state, (c1 - c0) * taps, 0.0f);
      k.conv(p.x + first * cd + c0, p.y + first * cd + c0, cd, p.weight + c0 * p.kernel, p.kernel,
             c1 - c0, st);
    }
    // The conv output and its SiLU are each rounded, as the reference stores them.
    for (int64_t t = 0; t < tokens; ++t) {
      float* y = p.y + t * cd + c0;
      round_to(p.act, y, c1 - c0);
      for (int64_t c = 0; c < c1 - c0; ++c) y[c] *= sigmoid(y[c]);
      round_to(p.act, y, c1 - c0);
    }
  });
}

void gated_delta_rule(const GatedDeltaRule& p, const RecurrentBatch& b, ThreadPool& pool,
                      ThreadScratch& scratch) {
  KCHECK(p.key_heads > 0 && p.value_heads % p.key_heads == 0,
         "gated_delta_rule: {} value heads over {} key heads", p.value_heads, p.key_heads);
  check_slots(b, p.states);
  const GatedDeltaNetKernels& kern = kernels();
  const int64_t nv = p.value_heads, dk = p.key_dim, dv = p.value_dim;
  const int64_t rho = nv / p.key_heads, head = dk * dv;
  const float sqrt_dk = std::sqrt(float(dk));
  pool.parallel_for(int64_t(b.num_seqs) * nv, 1, [&](int64_t i0, int64_t i1, int thread) {
    std::vector<float>& qk = scratch[thread].get<NormedQueriesKeys>().qk;
    int64_t normed = -1;  // the (sequence, key head) qk holds, as s · key_heads + key head
    for (int64_t item = i0; item < i1; ++item) {
      const int s = int(item / nv);
      const int64_t j = item % nv, kh = j / rho;
      const int32_t first = b.query_start_loc[s], n = b.query_start_loc[s + 1] - first;
      if (n == 0) continue;
      if (normed != s * p.key_heads + kh) {
        normed = s * p.key_heads + kh;
        qk.resize(size_t(n * 2 * dk));
        for (int64_t t = 0; t < n; ++t) {
          float* q = qk.data() + t * 2 * dk;
          l2_normed(p.q + (first + t) * p.stride + kh * dk, dk, q);
          for (int64_t i = 0; i < dk; ++i) q[i] /= sqrt_dk;
          l2_normed(p.k + (first + t) * p.stride + kh * dk, dk, q + dk);
        }
      }
      const SequenceStates st = sequence_states(b, p.states, s, j * head);
      float* m = st.state;
      if (starts_fresh(b, s)) std::fill_n(m, head, 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        if (st.hold != nullptr && t == n - 1) std::copy_n(m, head, st.hold);
        const int64_t token = first + t;
        // The reference's sigmoid runs in the activation dtype.
        const float beta = round_to(p.act, sigmoid(p.b[token * nv + j]));
        const float decay =
            std::exp(p.decay_rate[j] * softplus(p.a[token * nv + j] + p.dt_bias[j]));
        const float* q = qk.data() + t * 2 * dk;
        kern.delta_step(m, dk, dv, q + dk, q, p.v + token * p.stride + j * dv, beta, decay,
                        p.out + (token * nv + j) * dv, p.act);
        if (st.snapshots != nullptr && t >= st.first_snapshot && t < n - 1)
          std::copy_n(m, head, st.snapshots + (t - st.first_snapshot) * st.snapshot_stride);
      }
    }
  });
}

void gated_rms_norm(float* x, const float* z, const float* w, float eps, int64_t rows, int64_t dim,
                    DType act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = x + r * dim;
    const float* g = z + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(o[i]) * o[i];
    const float scale = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) o[i] *= scale;
    round_to(act, o, dim);
    for (int64_t i = 0; i < dim; ++i) o[i] *= w[i];
    round_to(act, o, dim);
    for (int64_t i = 0; i < dim; ++i) o[i] *= g[i] * sigmoid(g[i]);
    round_to(act, o, dim);
  }
}

}  // namespace kestrel::cpu
