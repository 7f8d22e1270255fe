// model/arch/decoder_model.h — what every decoder-only architecture shares. A family's file
// (model/arch/<family>.cc) derives from DecoderModel, loads its layers and owns their forward
// (run_layers); the base owns the token embedding, the final norm and the head (vocabulary-
// parallel under tensor parallelism), the batch's views per KV cache group, the RoPE tables, the
// scratch, the tensor-parallel group and the expert exchange, and the MTP module's forward.
// One thread — the model runner's — calls every method; nothing here is shared across threads.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "base/aligned_vector.h"
#include "model/causal_lm.h"
#include "model/kv_scales.h"
#include "model/layers/layer.h"
#include "model/layers/mtp_module.h"
#include "model/rope_table.h"
#include "model/tp_group.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

class DecoderModel : public CausalLM {
 public:
  // `act` (F32, BF16 or F16) is the precision activations are rounded to between ops; `kv` the
  // KV cache's format. With `tp` enabled the model holds one rank's heads and features
  // (model/tp_plan.h) and config() is the rank's.
  DecoderModel(const ModelConfig& cfg, DType act, const KvCacheQuant& kv, Backend& backend,
               const TensorParallel& tp);

  // Reads every tensor from `src` (checked against the config's shapes); the source must
  // outlive the model (tensors are views into it).
  Status load(WeightSource& src);

  const ModelConfig& config() const override { return rank_cfg_; }
  DType kv_cache_dtype() const override { return kv_.dtype; }
  Backend& backend() override { return be_; }
  int num_mtp_modules() const override { return mtp_ ? 1 : 0; }
  size_t weight_bytes() const override;
  size_t resident_weight_bytes() const override;
  void forward(const ForwardBatch& batch, KVCacheStorage& kv, float* logits) override;
  void forward_hidden(const ForwardBatch& batch, KVCacheStorage& kv) override;
  void head_logits(std::span<const int32_t> rows, float* logits) override;
  void final_hidden(std::span<const int32_t> rows, float* out) override;
  void mtp_forward(const ForwardBatch& batch, const float* hidden, KVCacheStorage& mtp_kv,
                   float* logits, float* next_hidden) override;
  void finish_step() override;

 protected:
  // The family's layers (and MTP module, into mtp_), loaded after the embedding and the head.
  virtual Status load_layers(const LoadContext& lc) = 0;
  // Runs the layers over the embedded batch x [T, hidden], leaving the residual stream the
  // final norm reads in x.
  virtual void run_layers(const LayerContext& ctx, float* x) = 0;
  // Bytes of the layers one decode token reads, and bytes they hold.
  virtual size_t layers_weight_bytes() const = 0;
  virtual size_t layers_resident_bytes() const = 0;
  // The token embedding rows of ids, rounded (a family may scale them).
  virtual void embed(const LayerContext& ctx, const int32_t* ids, float* x);
  // Applied to every [rows, vocab] block of logits the head writes (Gemma's softcap).
  virtual void finish_logits(float* logits, int64_t rows) { (void)logits, (void)rows; }

  // The [T, hidden] buffers the layers work in besides x.
  BlockBuffers block_buffers() { return {ws_.h.data(), ws_.y.data()}; }
  // This rank's vocabulary rows of a [V, H] head (all of them without tensor parallelism).
  Tensor vocab_rows(Tensor w) const;
  // Gives sliding-window layers their own RoPE (LayerContext::rope_local), as `local` says.
  void use_local_rope(const ModelConfig& local);

  ModelConfig cfg_;  // the whole model's, as the checkpoint stores it
  DType act_;
  Backend& be_;
  LinearWeight lm_head_;            // valid from load_layers() on
  std::unique_ptr<MtpModule> mtp_;  // set by families whose checkpoint carries one

 private:
  LayerContext context(const ForwardBatch& fb, std::span<const AttentionBatch> ab,
                       const RopeParams& rp, KVCacheStorage& kv);
  RecurrentBatch recurrent_batch(const ForwardBatch& fb, const KVCacheStorage& kv);
  RopeParams params_of(const RopeTable& t) const;
  void head(std::span<const int32_t> rows, const Norm& norm, const LinearWeight& w, float* logits);
  void normed_rows(std::span<const int32_t> rows, const Norm& norm, float* out);

  // The residual stream and block-level buffers, grown to the largest batch seen.
  struct Streams {
    AlignedVector<float> x, h, y, cat;
    int64_t tokens = 0;
    void ensure(int64_t T, int64_t H);
  };

  ModelConfig rank_cfg_;  // this rank's part (== cfg_ without tensor parallelism)
  KvCacheQuant kv_;
  TensorParallel tp_;
  WeightStore store_;
  Tensor embed_;
  bool tied_ = false;  // lm_head_ is (part of) embed_
  Norm final_norm_;
  RopeTable rope_;
  RopeTable rope_local_;  // sliding-window layers' own (rot_dim 0: none)
  RopeParams rope_local_params_;
  Scratch scratch_;
  Streams ws_;
  std::unique_ptr<TpGroup> tp_group_;        // set under tensor parallelism
  std::unique_ptr<ExpertExchange> experts_;  // set under expert parallelism
  std::unique_ptr<KVCacheStorage> idle_kv_;  // finish_step()'s stand-in
  std::vector<float> head_local_;            // this rank's vocabulary rows of the logits
  std::vector<int32_t> snapshot_slots_;      // recurrent_batch()'s
  int64_t tokens_ = 0;  // tokens of the last pass, whose residual stream ws_.x holds
};

}  // namespace kestrel
