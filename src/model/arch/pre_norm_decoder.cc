#include "model/arch/pre_norm_decoder.h"

namespace kestrel {

Status PreNormDecoder::load_layers(const LoadContext& lc) {
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    KASSIGN(PreNormBlock b, load_block(lc, fmt::format("{}layers.{}.", cfg_.weight_prefix, i), i));
    blocks_.push_back(std::move(b));
  }
  return Status::Ok();
}

void PreNormDecoder::run_layers(const LayerContext& ctx, float* x) {
  run_pre_norm_blocks(ctx, blocks_, cfg_.hidden_size, block_buffers(), x);
}

}  // namespace kestrel
