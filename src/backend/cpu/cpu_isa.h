// backend/cpu/cpu_isa.h — which SIMD level the CPU kernels run: the best this CPU and build
// support, capped for tests and for users who want another CPU's path (cap_cpu_isa,
// backend/backend.h), and whether AMX tiles may be used. Process-wide, set before a backend runs;
// every kernel reads the same choice, so all of a forward pass runs at one level.
#pragma once

namespace kestrel::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* isa_name(Isa isa);
// The level linear() and the other per-ISA kernels use now.
Isa selected_isa();
// The best level this CPU and build run (what "auto" selects).
Isa best_cpu_isa();

// Which SIMD implementation linear() uses on this CPU ("avx512", "avxvnni", "avx2", "scalar"): the
// best the CPU runs, or at most the one set_linear_isa named. "avxvnni" is the AVX2 level
// (Isa::kAvx2) with AVX-VNNI's vpdpbusd in the packed GEMM: the same bits, faster.
const char* linear_isa();
// Whether the AVX2 level runs with AVX-VNNI (selected_isa() is kAvx2, the CPU has it and the level
// was not capped to plain "avx2").
bool avx_vnni_selected();
// linear_isa() is "avx512": the other per-ISA kernels (attention, round_to, silu_mul) follow it.
bool avx512_selected();
// Forces an ISA for tests (falls back if the CPU lacks it); "auto" restores detection.
void set_linear_isa(const char* isa);

// Whether AMX may run where the CPU has it (set_packed_amx(false) switches it off: AMX and VNNI
// give the same bits, and the switch exists to compare them).
bool amx_enabled();
void set_packed_amx(bool on);
// Whether BF16 weights under BF16 activations may use the AMX-BF16 tiles (bf16_tiles.h). Off by
// default: TDPBF16PS accumulates each pair of products in its own way, so its results differ from
// the fma chain every other ISA computes (float_panels.h) in the last bit of some outputs.
bool amx_bf16_enabled();
void set_amx_bf16(bool on);

}  // namespace kestrel::cpu
