// The AVX-VNNI GEMM over packed weights (packed_gemm_avx2.h with vpdpbusd): AVX2 CPUs with
// AVX-VNNI (Intel from Alder Lake and Sapphire Rapids, AMD from Zen 5) take it for the "avxvnni"
// level; the same bits as the plain AVX2 kernel, at one instruction per four products and row
// where that one needs maddubs, madd and add.
#include "backend/cpu/packed_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)

#include "backend/cpu/packed_gemm_avx2.h"

namespace kestrel::cpu {

PackedGemmFn avxvnni_packed_gemm() {
  return __builtin_cpu_supports("avxvnni") ? kPackedGemm<true> : nullptr;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
PackedGemmFn avxvnni_packed_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
