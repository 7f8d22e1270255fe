#include "backend/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// The routing order: higher score first, NaN after every number, ties to the lower index. A
// strict total order, so the choice is deterministic even for NaN logits.
bool ranks_before(const float* s, int32_t a, int32_t b) {
  const float x = s[a], y = s[b];
  const bool nx = std::isnan(x), ny = std::isnan(y);
  if (nx != ny) return ny;
  if (!nx && x != y) return x > y;
  return a < b;
}

// The k best indices offered so far by ranks_before on s, best first (insertion into a list
// kept sorted; k is small).
struct TopK {
  const float* s;
  int k;
  int32_t* best;
  int n = 0;

  void offer(int32_t c) {
    if (n == k && !ranks_before(s, c, best[k - 1])) return;
    int j = n < k ? n++ : k - 1;
    for (; j > 0 && ranks_before(s, c, best[j - 1]); --j) best[j] = best[j - 1];
    best[j] = c;
  }
};

// The routers' per-expert and per-group values, kept across calls: routing runs once per MoE
// layer.
struct RouterScratch {
  std::vector<float> probs, u, sel, group_score;
  std::vector<int32_t> kept;
};

}  // namespace

void route_softmax_topk(const float* logits, int64_t T, int E, int k, bool norm_topk_prob,
                        int32_t* ids, float* weights, ScratchArena* scratch) {
  KCHECK(E >= 1 && k >= 1 && k <= E, "softmax router: top-{} of {} experts", k, E);
  ScratchArena own;
  std::vector<float>& probs = (scratch != nullptr ? *scratch : own).get<RouterScratch>().probs;
  probs.resize(size_t(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    float mx = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < E; ++e) mx = std::fmax(mx, x[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += probs[size_t(e)] = std::exp(x[e] - mx);
    for (int e = 0; e < E; ++e) probs[size_t(e)] /= sum;

    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    TopK top{probs.data(), k, id};
    for (int e = 0; e < E; ++e) top.offer(e);
    float total = 0.0f;
    for (int j = 0; j < k; ++j) total += w[j] = probs[size_t(id[j])];
    if (norm_topk_prob)
      for (int j = 0; j < k; ++j) w[j] /= total;
  }
}

void route_grouped_sigmoid(const float* logits, const float* bias, int64_t T, int E, int k,
                           int n_group, int topk_group, bool norm_topk_prob,
                           float routed_scaling_factor, int32_t* ids, float* weights,
                           ScratchArena* scratch) {
  KCHECK(n_group >= 1 && E >= 2 * n_group && E % n_group == 0,
         "grouped router: {} experts do not split into {} groups of at least two", E, n_group);
  KCHECK(topk_group >= 1 && topk_group <= n_group, "grouped router: keeps {} of {} groups",
         topk_group, n_group);
  const int group_size = E / n_group;
  KCHECK(k >= 1 && k <= topk_group * group_size,
         "grouped router: top-{} of the {} experts in {} kept groups", k, topk_group * group_size,
         topk_group);
  ScratchArena own;
  RouterScratch& s = (scratch != nullptr ? *scratch : own).get<RouterScratch>();
  std::vector<float>&u = s.u, &sel = s.sel, &group_score = s.group_score;
  std::vector<int32_t>& kept = s.kept;
  u.resize(size_t(E));
  sel.resize(size_t(E));
  group_score.resize(size_t(n_group));
  kept.resize(size_t(topk_group));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    for (int e = 0; e < E; ++e) {
      u[size_t(e)] = 1.0f / (1.0f + std::exp(-x[e]));
      sel[size_t(e)] = bias != nullptr ? u[size_t(e)] + bias[e] : u[size_t(e)];
    }
    for (int g = 0; g < n_group; ++g) {
      int32_t two[2];
      TopK top2{sel.data(), 2, two};
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) top2.offer(e);
      group_score[size_t(g)] = sel[size_t(two[0])] + sel[size_t(two[1])];
    }
    TopK groups{group_score.data(), topk_group, kept.data()};
    for (int g = 0; g < n_group; ++g) groups.offer(g);

    int32_t* id = ids + t * k;
    float* w = weights + t * k;
    TopK top{sel.data(), k, id};
    for (int32_t g : kept)
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) top.offer(e);
    float total = 0.0f;
    for (int j = 0; j < k; ++j) total += w[j] = u[size_t(id[j])];
    const float denom = total + 1e-20f;
    for (int j = 0; j < k; ++j)
      w[j] = (norm_topk_prob ? w[j] / denom : w[j]) * routed_scaling_factor;
  }
}

void group_by_expert(const int32_t* ids, int64_t T, int k, int E, MoePermutation& perm) {
  KCHECK(T >= 0 && k >= 1 && E >= 1 && T * k <= std::numeric_limits<int32_t>::max(),
         "group_by_expert: {} tokens × {} experts each over {} experts", T, k, E);
  const int32_t n = int32_t(T * k);
  // Counts go to offsets[e + 1]; after the prefix sum offsets[e] is where expert e starts and
  // serves as its cursor while placing, which leaves it at the next expert's start; shifting
  // by one restores the starts.
  perm.offsets.assign(size_t(E) + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    KCHECK(ids[i] >= 0 && ids[i] < E, "expert id {} out of range [0, {})", ids[i], E);
    ++perm.offsets[size_t(ids[i]) + 1];
  }
  for (int e = 0; e < E; ++e) perm.offsets[size_t(e) + 1] += perm.offsets[size_t(e)];
  perm.token.resize(size_t(n));
  perm.row_of_slot.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t at = perm.offsets[size_t(ids[i])]++;
    perm.token[size_t(at)] = i / k;
    perm.row_of_slot[size_t(i)] = at;
  }
  for (int e = E; e > 0; --e) perm.offsets[size_t(e)] = perm.offsets[size_t(e) - 1];
  perm.offsets[0] = 0;
}

void route_sqrt_softplus(const float* logits, const float* bias, int64_t T, int E, int k,
                         bool given_ids, float scaling, DType act, int32_t* ids, float* weights,
                         ScratchArena* scratch) {
  KCHECK(E >= 1 && k >= 1 && k <= E, "sqrtsoftplus router: top-{} of {} experts", k, E);
  ScratchArena own;
  RouterScratch& rs = (scratch != nullptr ? *scratch : own).get<RouterScratch>();
  rs.probs.resize(size_t(E));
  rs.sel.resize(size_t(E));
  float* s = rs.probs.data();
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    for (int e = 0; e < E; ++e) {
      // softplus as torch computes it (linear above a threshold of 20), each step rounded.
      float sp = x[e] > 20.0f ? x[e] : std::log1p(std::exp(x[e]));
      round_to(act, &sp, 1);
      s[e] = std::sqrt(sp);
    }
    round_to(act, s, E);
    int32_t* chosen = ids + t * k;
    if (!given_ids) {
      for (int e = 0; e < E; ++e) rs.sel[size_t(e)] = s[e] + (bias != nullptr ? bias[e] : 0.0f);
      TopK top{rs.sel.data(), k, chosen};
      for (int e = 0; e < E; ++e) top.offer(e);
    }
    float* w = weights + t * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      KCHECK(chosen[j] >= 0 && chosen[j] < E, "expert id {} out of range [0, {})", chosen[j], E);
      sum += w[j] = s[chosen[j]];
    }
    round_to(act, &sum, 1);
    float denom = sum + 1e-20f;
    round_to(act, &denom, 1);
    for (int j = 0; j < k; ++j) {
      w[j] /= denom;
      round_to(act, &w[j], 1);
      w[j] *= scaling;
    }
    round_to(act, w, k);
  }
}

void moe_route(const float* logits, int64_t T, const MoeRouting& r, int32_t* ids, float* weights,
               ThreadPool& pool, ThreadScratch* scratch) {
  const int E = r.num_experts, k = r.top_k;
  ThreadScratch own(scratch != nullptr ? 0 : pool.size());
  ThreadScratch& arenas = scratch != nullptr ? *scratch : own;
  // Tokens are routed independently: chunks of them go to the threads.
  pool.parallel_for(T, 16, [&](int64_t b, int64_t e, int thread) {
    const float* l = logits + b * E;
    if (r.kind == MoeRouting::Kind::kSqrtSoftplus)
      route_sqrt_softplus(l, r.bias, e - b, E, k, r.given_ids, r.routed_scaling_factor, r.act,
                          ids + b * k, weights + b * k, &arenas[thread]);
    else if (r.kind == MoeRouting::Kind::kGroupedSigmoid)
      route_grouped_sigmoid(l, r.bias, e - b, E, k, r.n_group, r.topk_group, r.norm_topk_prob,
                            r.routed_scaling_factor, ids + b * k, weights + b * k, &arenas[thread]);
    else
      route_softmax_topk(l, e - b, E, k, r.norm_topk_prob, ids + b * k, weights + b * k,
                         &arenas[thread]);
  });
}

void moe_permute(const float* x, int64_t T, int64_t H, const int32_t* ids, int k, int E,
                 MoePermutation& perm, float* permuted, ThreadPool& pool) {
  // The sort is T·k integers; the gather moves T·k·H floats and is what the threads share.
  group_by_expert(ids, T, k, E, perm);
  pool.parallel_for(T * k, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::copy_n(x + int64_t(perm.token[size_t(r)]) * H, H, permuted + r * H);
  });
}

void moe_combine(const float* expert_out, const MoePermutation& perm, const float* weights,
                 int64_t T, int k, int64_t H, bool round_each, DType act, float* out,
                 ThreadPool& pool) {
  pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out + t * H;
      std::fill_n(o, H, 0.0f);
      for (int j = 0; j < k; ++j) {
        const float* p = expert_out + int64_t(perm.row_of_slot[size_t(t * k + j)]) * H;
        if (round_each) {
          const float wj = round_to(act, weights[t * k + j]);
          for (int64_t i = 0; i < H; ++i) o[i] = round_to(act, o[i] + round_to(act, p[i] * wj));
        } else {
          const float wj = weights[t * k + j];
          for (int64_t i = 0; i < H; ++i) o[i] += p[i] * wj;
        }
      }
      round_to(act, o, H);
    }
  });
}

}  // namespace kestrel::cpu
