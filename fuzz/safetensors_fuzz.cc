// libFuzzer target: safetensors header parsing and tensor views.
#include <cstddef>
#include <cstdint>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = kestrel::SafetensorsFile::parse(data, size);
  if (!f.ok()) return 0;
  for (const kestrel::SafetensorsEntry& e : (*f)->entries()) {
    auto t = (*f)->tensor(e.name);
    if (!t.ok() || t->nbytes() == 0) continue;
    // Touch both ends so ASan reports a view that escapes the input.
    const auto* p = static_cast<const volatile uint8_t*>(t->data);
    (void)p[0];
    (void)p[t->nbytes() - 1];
  }
  return 0;
}
