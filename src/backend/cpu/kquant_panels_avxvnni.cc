// The AVX-VNNI GEMM over K-quant panels (kquant_gemm_avx2.h with vpdpbusd), for the "avxvnni"
// level (cpu_isa.h): the same bits as the plain AVX2 kernel.
#include "backend/cpu/kquant_panels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)

#include "backend/cpu/kquant_gemm_avx2.h"

namespace kestrel::cpu {

KQuantGemmFn avxvnni_kquant_gemm() {
  return __builtin_cpu_supports("avxvnni") ? kquant_gemm<true> : nullptr;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
KQuantGemmFn avxvnni_kquant_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
