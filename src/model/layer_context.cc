#include "model/layer_context.h"

namespace kestrel {

void output_projection(const LayerContext& ctx, const Tensor& w, TpSplit in_split, const float* in,
                       int64_t m, float* out) {
  if (ctx.tp == nullptr) {
    ctx.be.linear(w, in, m, out);
    ctx.round(out, m * w.rows());
    return;
  }
  TpGroup& tp = *ctx.tp;
  float* whole = ctx.scratch.get(kSlotTpIn, m * w.cols());
  tp.gather(in_split, in, m, whole);
  float* part = ctx.scratch.get(kSlotTpOut, m * w.rows());
  ctx.be.linear(w, whole, m, part);
  ctx.round(part, m * w.rows());
  tp.gather(TpSplit::kHidden, part, m, out);
}

}  // namespace kestrel
