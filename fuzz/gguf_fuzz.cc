// libFuzzer target: GGUF parsing, tensor views and the GGUF -> ModelConfig mapping.
#include <cstddef>
#include <cstdint>

#include "formats/gguf.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = kestrel::GgufFile::parse(data, size);
  if (!g.ok()) return 0;
  for (const kestrel::GgufTensorInfo& info : (*g)->tensors()) {
    auto t = (*g)->tensor(info.name);
    if (!t.ok() || t->nbytes() == 0) continue;
    // Touch both ends so ASan reports a view that escapes the input.
    const auto* p = static_cast<const volatile uint8_t*>(t->data);
    (void)p[0];
    (void)p[t->nbytes() - 1];
  }
  (void)kestrel::config_from_gguf(**g);
  return 0;
}
