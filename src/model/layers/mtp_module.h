// model/layers/mtp_module.h — a multi-token-prediction module: z = eh_proj([enorm(Emb(t_{i+1})) |
// hnorm(h_i)]), one pre-norm decoder block with its own KV cache, then its own final norm and
// head. DeepSeek's (model.layers.L.{enorm, hnorm, eh_proj, shared_head}) drafts again from the
// block's output; Qwen3-Next's and Qwen3.5's (mtp.{pre_fc_norm_embedding, pre_fc_norm_hidden,
// fc, norm}, the head the model's) from that output after its norm. The families load it
// (model/arch/deepseek_v3.cc, qwen3_next.cc); DecoderModel::mtp_forward runs it.
#pragma once

#include <vector>

#include "model/layers/pre_norm_block.h"

namespace kestrel {

struct MtpModule {
  std::vector<float> enorm, hnorm;
  Norm head_norm;
  LinearWeight eh_proj, head;
  PreNormBlock block;
  bool drafts_from_normed = false;
};

}  // namespace kestrel
