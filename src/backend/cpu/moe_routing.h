// backend/cpu/moe_routing.h — MoE routers (Qwen3-MoE softmax top-k, DeepSeek-V3 group-limited
// sigmoid, DeepSeek-V4 sqrtsoftplus and hash routing), the grouping of routed tokens by expert, and
// the parallel MoE ops built on them: routing, permuting rows into expert order and the weighted
// combine (models.md §3, §4.6).
//
// Both routers work in f32 on router logits [T, E] and write, per token, k expert ids and
// weights ([T, k] each). Order within a token is deterministic: descending selection score,
// ties to the lower expert id. (HF's torch.topk leaves tie order, and with sorted=False all
// order, unspecified; the set chosen is the same except among exact ties.)
//
// `scratch`: the calling thread's arena, or for the pool ops the pool's arenas
// (thread_scratch.h); null: buffers of the call's own.
#pragma once

#include <cstdint>

#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {

// Qwen3-MoE: p = softmax(logits) over all E experts, the k largest p, and with norm_topk_prob
// the k weights divided by their sum. Selection score: p.
void route_softmax_topk(const float* logits, int64_t T, int E, int k, bool norm_topk_prob,
                        int32_t* ids, float* weights, ScratchArena* scratch = nullptr);

// DeepSeek-V3 "noaux_tc": u = sigmoid(logits); selection scores s = u + bias (bias [E], may be
// null for none); the E experts form n_group groups of E / n_group consecutive experts, a
// group's score is the sum of its two largest s; the topk_group best groups (ties to the lower
// group) are kept and the k best s among their experts chosen — experts of other groups never
// are (their scores are masked to -inf, as HF transformers 5.x and DeepSeek's reference do).
// Weights: the unbiased u, with norm_topk_prob divided by (their sum + 1e-20), then multiplied
// by routed_scaling_factor. Needs E % n_group == 0, at least two experts per group,
// 1 ≤ topk_group ≤ n_group and 1 ≤ k ≤ topk_group · E / n_group.
void route_grouped_sigmoid(const float* logits, const float* bias, int64_t T, int E, int k,
                           int n_group, int topk_group, bool norm_topk_prob,
                           float routed_scaling_factor, int32_t* ids, float* weights,
                           ScratchArena* scratch = nullptr);

// DeepSeek-V4 (ops.h MoeRouting::Kind::kSqrtSoftplus): s = sqrt(softplus(logits)) rounded to
// act at each step; the k best s + bias (bias may be null), or with given_ids the k experts
// already in ids (hash routing); weights s / (Σ s + 1e-20) · scaling, rounded likewise.
void route_sqrt_softplus(const float* logits, const float* bias, int64_t T, int E, int k,
                         bool given_ids, float scaling, DType act, int32_t* ids, float* weights,
                         ScratchArena* scratch = nullptr);

// Backend::moe_route, moe_permute and moe_combine (backend/backend.h) on `pool`: tokens, rows
// and output tokens split over the threads; each result is the same whatever the split.
void moe_route(const float* logits, int64_t T, const MoeRouting& routing, int32_t* ids,
               float* weights, ThreadPool& pool, ThreadScratch* scratch = nullptr);
void moe_permute(const float* x, int64_t T, int64_t H, const int32_t* ids, int k, int E,
                 MoePermutation& perm, float* permuted, ThreadPool& pool);
void moe_combine(const float* expert_out, const MoePermutation& perm, const float* weights,
                 int64_t T, int k, int64_t H, bool round_each, DType act, float* out,
                 ThreadPool& pool);

// Groups ids ([T, k], each in [0, E)) by expert, a stable counting sort: perm's offsets, the
// token of each row and the row of each (t, j) pair. Reuses perm's capacity.
void group_by_expert(const int32_t* ids, int64_t T, int k, int E, MoePermutation& perm);

}  // namespace kestrel::cpu
