// The AVX2 GEMM over K-quant panels (kquant_gemm_avx2.h, without VNNI), and the code conversion
// its batches and the AVX-512 kernel's share. CPUs with AVX-VNNI run the same walk with vpdpbusd
// (kquant_panels_avxvnni.cc) when that level is selected; both give the same bits.
#include "backend/cpu/kquant_panels.h"

#include "base/status.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/kquant_gemm_avx2.h"

namespace kestrel::cpu {
namespace {

// The level may change between calls (tests, set_linear_isa): chosen per call, one load.
void gemm_at_selected_level(const KQuantGemm& g, int64_t p0, int64_t p1) {
  static const KQuantGemmFn vnni = avxvnni_kquant_gemm();
  if (vnni != nullptr && avx_vnni_selected()) return vnni(g, p0, p1);
  kquant_gemm<false>(g, p0, p1);
}

}  // namespace

void convert_kquant_panel(DType t, const uint8_t* panel, int64_t nb, uint8_t* out) {
  switch (t) {
    case DType::Q4_K:
      return convert_panel<DType::Q4_K>(panel, nb, out);
    case DType::Q5_K:
      return convert_panel<DType::Q5_K>(panel, nb, out);
    default:
      return convert_panel<DType::Q6_K>(panel, nb, out);
  }
}

KQuantGemmFn avx2_kquant_gemm() {
  return gemm_at_selected_level;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
void convert_kquant_panel(DType, const uint8_t*, int64_t, uint8_t*) {
  KCHECK(false, "convert_kquant_panel: this build has no AVX2 code");
}
KQuantGemmFn avx2_kquant_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
