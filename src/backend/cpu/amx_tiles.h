// backend/cpu/amx_tiles.h — what the AMX GEMMs (matmul_packed_amx.cc, matmul_bf16_amx.cc) share:
// the LDTILECFG operand and Linux's permission to use the tile state.
#pragma once

#include <cstdint>

namespace kestrel::cpu {

// The 64-byte operand of LDTILECFG (palette 1). Kernels keep theirs as constant-initialised
// globals: GCC 12 does not see ldtilecfg read its operand and would drop stores to a
// configuration built at run time.
struct alignas(64) AmxTileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Eight tiles of 16 rows × 64 bytes: the results of a 2 × 2 register tile (two row tiles × two
// panels) and its two activation and two weight operands (matmul_bf16_amx.cc, int8_gemm_amx.cc).
inline constexpr AmxTileConfig kEightFullTiles = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// Linux hands out the tile state only on request: asks once per process (thread-safe) and says
// whether it was granted. The caller checks the CPU flags its own instructions need.
bool amx_tile_state_granted();

}  // namespace kestrel::cpu
