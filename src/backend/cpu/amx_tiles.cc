#include "backend/cpu/amx_tiles.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace kestrel::cpu {

bool amx_tile_state_granted() {
  static const bool granted = [] {
    if (!__builtin_cpu_supports("amx-tile")) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

}  // namespace kestrel::cpu
