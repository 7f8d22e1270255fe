// model/layer_context.h — what every layer of a forward pass shares: the backend, the batch's
// attention view, RoPE, activation precision, grow-only scratch buffers, and under tensor
// parallelism the rank's group, under expert parallelism the exchange of routed rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/causal_lm.h"
#include "model/expert_exchange.h"
#include "model/tp_group.h"
#include "model/weights.h"

namespace kestrel {

// Scratch slots of the backend's workspace. One forward runs one layer at a time, so layers share
// buffers; a component
// uses only its own slots, including while it calls another (the MoE block runs dense MLPs).
enum ScratchSlot : int {
  kSlotAttnQ,
  kSlotAttnK,
  kSlotAttnV,
  kSlotAttnOut,
  kSlotMlaQa,
  kSlotMlaKvA,
  kSlotMlaLatent,
  kSlotMlaKRope,
  kSlotMlaQRope,
  kSlotMlaHeadIn,
  kSlotMlaHeadOut,
  kSlotMlaQLat,
  kSlotMlaOLat,
  kSlotMlpGate,
  kSlotMlpUp,
  kSlotMoeLogits,
  kSlotMoeWeights,
  kSlotMoeIn,
  kSlotMoeOut,
  kSlotMoeShared,
  kSlotTpIn,
  kSlotTpOut,
  kSlotAttnGate,
  kSlotLinearQkv,
  kSlotLinearZ,
  kSlotLinearB,
  kSlotLinearA,
  kSlotLinearConv,
  kSlotLinearOut,
  kSlotIndexQ,
  kSlotIndexK,
  kSlotIndexW,
  kNumScratchSlots,
};

// The backend's workspace, through the model's slot names.
class Scratch {
 public:
  explicit Scratch(Workspace& ws) : ws_(ws) {}
  float* get(ScratchSlot slot, int64_t n) { return ws_.get(int(slot), n); }

 private:
  Workspace& ws_;
};

struct LayerContext {
  Backend& be;
  DType act;  // activations are rounded to this dtype where the reference stores them
  float eps;  // RMSNorm epsilon
  int64_t num_tokens;
  const int32_t* positions;
  const int32_t* token_ids;  // the batch's tokens (DeepSeek-V4's hash routing reads them)
  std::span<const AttentionBatch> attn;  // per KV cache group of kv
  const RopeParams& rope;
  KVCacheStorage& kv;
  Scratch& scratch;
  TpGroup* tp = nullptr;  // tensor parallelism: this rank's group; null: one process
  // Expert parallelism: where MoE layers run their routed rows; null: every expert is here.
  ExpertExchange* experts = nullptr;
  // Zero-centred norms (ModelConfig::norm_offset): weights hold 1 + w (see rms_norm below).
  bool norm_offset = false;
  // The batch's sequences as linear-attention layers run them: their state slots, holds and
  // draft snapshots (ForwardBatch::state_slots, state_holds, state_snapshots).
  RecurrentBatch recurrent;
  // Gemma3: the RoPE of sliding-window layers (null: every layer uses `rope`).
  const RopeParams* rope_local = nullptr;

  void round(float* p, int64_t n) const { be.round_to(act, p, n); }
  // RMSNorm of `rows` rows of `dim` as the model's reference rounds it (rms_norm_rows).
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float* y) const;
  // The same with a norm's bias, if it has one, added and rounded after.
  void rms_norm(const float* x, const Norm& n, int64_t rows, int64_t dim, float* y) const;
  // The batch as cache layer `layer` sees it: its group's block tables and slots, its window.
  const AttentionBatch& attention(int layer) const { return attn[size_t(kv.place(layer).group)]; }
};

// RMSNorm with weight w, rounded as the reference does: Llama's form rounds the normed row to
// act, then multiplies by w and rounds again; the zero-centred form (`offset`, w holding 1 + w)
// multiplies in f32 and rounds once.
void rms_norm_rows(Backend& be, DType act, bool offset, const float* x, const float* w, float eps,
                   int64_t rows, int64_t dim, float* y);
// x += y rounded to act, then out = rms_norm_rows(x): a residual add and the next norm.
void add_rms_norm_rows(Backend& be, DType act, bool offset, float* x, const float* y,
                       const float* w, float eps, int64_t rows, int64_t dim, float* out);
// With a Norm: its bias, if any, added to `out` (not to the residual x) and rounded.
void rms_norm_rows(Backend& be, DType act, bool offset, const float* x, const Norm& n, float eps,
                   int64_t rows, int64_t dim, float* y);
void add_rms_norm_rows(Backend& be, DType act, bool offset, float* x, const float* y, const Norm& n,
                       float eps, int64_t rows, int64_t dim, float* out);

// out [m, hidden] = w · in, rounded: an output projection (attention's o, an MLP's down). Under
// tensor parallelism `in` holds this rank's features of `in_split` and w this rank's hidden rows
// over the whole input: the input is gathered, the rank's rows computed, and the output
// gathered, so every rank gets all of it in the bits one process computes.
void output_projection(const LayerContext& ctx, const LinearWeight& w, TpSplit in_split,
                       const float* in, int64_t m, float* out);

}  // namespace kestrel
