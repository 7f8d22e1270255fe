#include "model/layer_context.h"

namespace kestrel {

void rms_norm_rows(Backend& be, DType act, bool offset, const float* x, const float* w, float eps,
                   int64_t rows, int64_t dim, float* y) {
  if (!offset) {
    be.rms_norm(x, w, eps, rows, dim, y, act);
    return;
  }
  be.rms_norm(x, w, eps, rows, dim, y, DType::F32);
  be.round_to(act, y, rows * dim);
}

void add_rms_norm_rows(Backend& be, DType act, bool offset, float* x, const float* y,
                       const float* w, float eps, int64_t rows, int64_t dim, float* out) {
  if (!offset) {
    be.add_rms_norm(x, y, w, eps, rows, dim, out, act);
    return;
  }
  be.add_inplace(x, y, rows * dim);
  be.round_to(act, x, rows * dim);
  rms_norm_rows(be, act, true, x, w, eps, rows, dim, out);
}

namespace {

void add_norm_bias(Backend& be, DType act, const Norm& n, int64_t rows, int64_t dim, float* y) {
  if (n.bias.empty()) return;
  be.add_bias(y, n.bias.data(), rows, dim);
  be.round_to(act, y, rows * dim);
}

}  // namespace

void rms_norm_rows(Backend& be, DType act, bool offset, const float* x, const Norm& n, float eps,
                   int64_t rows, int64_t dim, float* y) {
  rms_norm_rows(be, act, offset, x, n.weight.data(), eps, rows, dim, y);
  add_norm_bias(be, act, n, rows, dim, y);
}

void add_rms_norm_rows(Backend& be, DType act, bool offset, float* x, const float* y, const Norm& n,
                       float eps, int64_t rows, int64_t dim, float* out) {
  add_rms_norm_rows(be, act, offset, x, y, n.weight.data(), eps, rows, dim, out);
  add_norm_bias(be, act, n, rows, dim, out);
}

void LayerContext::rms_norm(const float* x, const float* w, int64_t rows, int64_t dim,
                            float* y) const {
  rms_norm_rows(be, act, norm_offset, x, w, eps, rows, dim, y);
}

void LayerContext::rms_norm(const float* x, const Norm& n, int64_t rows, int64_t dim,
                            float* y) const {
  rms_norm_rows(be, act, norm_offset, x, n, eps, rows, dim, y);
}

void output_projection(const LayerContext& ctx, const LinearWeight& w, TpSplit in_split,
                       const float* in, int64_t m, float* out) {
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
