// model/arch/pre_norm_decoder.h — the base of the families whose layers are all pre-norm blocks
// (Llama-like, Qwen3-MoE, DeepSeek-V3, Qwen3-Next / Qwen3.5): the family says which token mixer
// and feed-forward part each layer has (load_block); this class stacks and runs them.
#pragma once

#include <string>
#include <vector>

#include "model/arch/decoder_model.h"
#include "model/layers/pre_norm_block.h"

namespace kestrel {

class PreNormDecoder : public DecoderModel {
 public:
  using DecoderModel::DecoderModel;

 protected:
  // Layer `layer`'s block, its tensors under `p` (…layers.N.); an index past the hidden layers
  // asks for the MTP module's block.
  virtual Expected<PreNormBlock> load_block(const LoadContext& lc, const std::string& p,
                                            int64_t layer) = 0;
  // Every hidden layer's block (a family with an MTP module loads it after these).
  Status load_layers(const LoadContext& lc) override;
  void run_layers(const LayerContext& ctx, float* x) override;
  size_t layers_weight_bytes() const override { return blocks_weight_bytes(blocks_); }
  size_t layers_resident_bytes() const override { return blocks_resident_bytes(blocks_); }

 private:
  std::vector<PreNormBlock> blocks_;
};

}  // namespace kestrel
