#include "model/layers/pre_norm_block.h"

namespace kestrel {

Status load_pre_norm_norms(const LoadContext& lc, const std::string& p, PreNormBlock& b) {
  const int64_t H = lc.cfg.hidden_size;
  KASSIGN(b.attn_norm, load_norm_with_bias(lc.src, p + "input_layernorm", H, lc.cfg));
  KASSIGN(b.ffn_norm, load_norm_with_bias(lc.src, p + "post_attention_layernorm", H, lc.cfg));
  return Status::Ok();
}

void run_pre_norm_blocks(const LayerContext& ctx, std::span<PreNormBlock> blocks, int64_t hidden,
                         const BlockBuffers& buf, float* x) {
  const int64_t T = ctx.num_tokens, H = hidden;
  ctx.rms_norm(x, blocks[0].attn_norm, T, H, buf.h);
  for (size_t i = 0; i < blocks.size(); ++i) {
    PreNormBlock& b = blocks[i];
    b.attn->forward(ctx, int(i), buf.h, buf.y);
    add_rms_norm_rows(ctx.be, ctx.act, ctx.norm_offset, x, buf.y, b.ffn_norm, ctx.eps, T, H, buf.h);
    b.ffn->forward(ctx, buf.h, buf.y);
    if (i + 1 < blocks.size()) {
      add_rms_norm_rows(ctx.be, ctx.act, ctx.norm_offset, x, buf.y, blocks[i + 1].attn_norm,
                        ctx.eps, T, H, buf.h);
    } else {
      ctx.be.add_inplace(x, buf.y, T * H);
      ctx.round(x, T * H);
    }
  }
}

size_t blocks_weight_bytes(std::span<const PreNormBlock> blocks) {
  size_t b = 0;
  for (const PreNormBlock& blk : blocks)
    b += blk.attn->weight_bytes() + blk.ffn->weight_bytes_per_token();
  return b;
}

size_t blocks_resident_bytes(std::span<const PreNormBlock> blocks) {
  size_t b = 0;
  for (const PreNormBlock& blk : blocks) b += blk.attn->weight_bytes() + blk.ffn->resident_bytes();
  return b;
}

}  // namespace kestrel
