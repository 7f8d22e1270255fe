// model/layers/pre_norm_block.h — the pre-norm decoder block most families stack:
// x += attn(norm(x)); x += ffn(norm(x)), with HF's input_layernorm and post_attention_layernorm.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "model/layers/layer.h"

namespace kestrel {

struct PreNormBlock {
  Norm attn_norm, ffn_norm;
  std::unique_ptr<AttentionLayer> attn;
  std::unique_ptr<FfnLayer> ffn;
};

// The block's two norms, under `p` (…layers.N.).
Status load_pre_norm_norms(const LoadContext& lc, const std::string& p, PreNormBlock& b);

// Two [T, hidden] buffers the blocks write through: h the normed input, y a sublayer's output.
struct BlockBuffers {
  float* h;
  float* y;
};

// Runs `blocks` over the residual stream x [T, hidden] (cache layer = the block's index),
// rounding where the reference stores activations; each residual add runs fused with the norm
// after it.
void run_pre_norm_blocks(const LayerContext& ctx, std::span<PreNormBlock> blocks, int64_t hidden,
                         const BlockBuffers& buf, float* x);

// Bytes one decode token reads from the blocks, and bytes they hold.
size_t blocks_weight_bytes(std::span<const PreNormBlock> blocks);
size_t blocks_resident_bytes(std::span<const PreNormBlock> blocks);

}  // namespace kestrel
