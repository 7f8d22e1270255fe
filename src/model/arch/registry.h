// model/arch/registry.h — building a model by its Hugging Face `architectures` name: the name
// picks its family's file (model/arch/<family>.cc), which composes the shared layers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/kv_scales.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

// The model cfg.architecture names, loaded from `src` (which must outlive it) on `backend`:
// activations rounded to `act_dtype` (F32, BF16 or F16), the KV cache in `kv`'s format, and with
// `tp` enabled one rank's heads and features (config() is then the rank's). Fails as
// check_architecture does, or naming the tensor loading stopped at.
Expected<std::unique_ptr<CausalLM>> build_model(const ModelConfig& cfg, DType act_dtype,
                                                const KvCacheQuant& kv, WeightSource& src,
                                                Backend& backend, const TensorParallel& tp = {});

// Whether a family serves cfg.architecture and implements every feature the config asks for;
// the error names the architecture or the feature.
Status check_architecture(const ModelConfig& cfg);

// Every architecture name a family serves, in the registry's order.
const std::vector<std::string>& supported_architectures();

// The family serving `architecture` ("llama", "deepseek_v3", ...), or "" for none.
std::string_view architecture_family(std::string_view architecture);

}  // namespace kestrel
