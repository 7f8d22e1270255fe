// The AVX2 GEMM over packed weights (packed_gemm_avx2.h, without VNNI). CPUs with AVX-VNNI run
// the same walk with vpdpbusd (matmul_packed_avxvnni.cc) when that level is selected; both give
// the same bits.
#include "backend/cpu/packed_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/packed_gemm_avx2.h"

namespace kestrel::cpu {
namespace {

// The level is chosen per process but may change between calls (tests, set_linear_isa), so the
// choice is made per call: one load.
void gemm_at_selected_level(const PackedGemm& g, int64_t p0, int64_t p1) {
  static const PackedGemmFn vnni = avxvnni_packed_gemm();
  if (vnni != nullptr && avx_vnni_selected()) return vnni(g, p0, p1);
  kPackedGemm<false>(g, p0, p1);
}

}  // namespace

PackedGemmFn avx2_packed_gemm() {
  return gemm_at_selected_level;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
PackedGemmFn avx2_packed_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
