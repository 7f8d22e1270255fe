#include "backend/cpu/cpu_isa.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/packed_matmul.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

bool cpu_supports(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Every AVX2 CPU also has F16C (clang cannot query "f16c"; the build baseline requires it).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2 && avx2_dot_kernels() != nullptr;
    case Isa::kAvx512:
      // The AVX-512 table falls back to nothing, but its file is built with these flags, so
      // every one of them must be present.
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni") && avx512_packed_gemm() != nullptr;
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

// The best ISA at or below `want` that this CPU and build support.
Isa best_isa(Isa want) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (int(isa) <= int(want) && cpu_supports(isa)) return isa;
  }
  return Isa::kScalar;
}

std::optional<Isa> parse_isa(const char* name) {
  if (std::strcmp(name, "auto") == 0 || std::strcmp(name, "avx512") == 0) return Isa::kAvx512;
  if (std::strcmp(name, "avx2") == 0 || std::strcmp(name, "avxvnni") == 0) return Isa::kAvx2;
  if (std::strcmp(name, "scalar") == 0) return Isa::kScalar;
  return std::nullopt;
}

bool cpu_has_avx_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avxvnni") && avxvnni_packed_gemm() != nullptr;
#else
  return false;
#endif
}

std::atomic<Isa>& isa_choice() {
  static std::atomic<Isa> isa{best_isa(Isa::kAvx512)};
  return isa;
}

// Whether the AVX2 level may use AVX-VNNI: everywhere the CPU has it, except under the "avx2" cap
// (which stands for the AVX2 CPUs without it).
std::atomic<bool>& vnni_choice() {
  static std::atomic<bool> on{cpu_has_avx_vnni()};
  return on;
}

std::atomic<bool>& amx_choice() {
  static std::atomic<bool> on{true};
  return on;
}

std::atomic<bool>& amx_bf16_choice() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

Isa selected_isa() {
  return isa_choice().load();
}

Isa best_cpu_isa() {
  return best_isa(Isa::kAvx512);
}

const char* linear_isa() {
  return avx_vnni_selected() ? "avxvnni" : isa_name(selected_isa());
}

bool avx_vnni_selected() {
  return selected_isa() == Isa::kAvx2 && vnni_choice().load();
}

bool avx512_selected() {
  return selected_isa() == Isa::kAvx512;
}

void set_linear_isa(const char* isa) {
  const std::optional<Isa> want = parse_isa(isa);
  KCHECK(want.has_value(), "set_linear_isa: unknown ISA '{}' (auto, avx512, avxvnni, avx2, scalar)",
         isa);
  isa_choice().store(best_isa(*want));
  vnni_choice().store(std::strcmp(isa, "avx2") != 0 && cpu_has_avx_vnni());
}

bool amx_enabled() {
  return amx_choice().load();
}

void set_packed_amx(bool on) {
  amx_choice().store(on);
}

bool amx_bf16_enabled() {
  return amx_bf16_choice().load();
}

void set_amx_bf16(bool on) {
  amx_bf16_choice().store(on);
}

}  // namespace kestrel::cpu
