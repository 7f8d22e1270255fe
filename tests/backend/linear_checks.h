// tests/backend/linear_checks.h — what the linear-kernel tests share: the ISAs this machine
// runs, and a collector of outputs that miss their reference by more than a per-output bound.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"

namespace kestrel::cpu {

// The ISAs this machine runs, scalar first.
inline std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    set_linear_isa(isa);
    if (std::string(linear_isa()) == isa) out.push_back(isa);
  }
  set_linear_isa("auto");
  return out;
}

// Counts outputs with |got - want| > bound and describes the first.
struct Mismatches {
  int count = 0;
  std::string first;
  void check(const std::vector<float>& got, const std::vector<double>& want,
             const std::vector<double>& bound, const char* what) {
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(got[i] - want[i]) <= bound[i]) continue;
      if (count++ == 0) {
        std::ostringstream s;
        s << what << ": output " << i << " got " << got[i] << " want " << want[i] << " bound "
          << bound[i];
        first = s.str();
      }
    }
  }
};

}  // namespace kestrel::cpu
