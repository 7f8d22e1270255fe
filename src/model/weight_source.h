// model/weight_source.h — where a model's tensors come from, addressed by Hugging Face names:
// a safetensors checkpoint, a GGUF file (names mapped to GGUF's), or random "dummy" weights.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace kestrel {

class GgufFile;
class SafetensorsCheckpoint;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& hf_name) const = 0;
  // The tensor, checked against the expected PyTorch-order shape (clear error on mismatch).
  virtual Expected<Tensor> get(const std::string& hf_name, const Shape& expected) = 0;
  // Per-frequency RoPE divisors stored by the GGUF converter for llama3 scaling, if any.
  virtual std::optional<std::vector<float>> rope_freq_divisors() const { return std::nullopt; }
  virtual std::string describe() const = 0;
};

std::unique_ptr<WeightSource> make_safetensors_source(std::unique_ptr<SafetensorsCheckpoint> ckpt,
                                                      std::string dir);
// The GGUF file must outlive the source.
std::unique_ptr<WeightSource> make_gguf_source(const GgufFile& gguf, std::string path);
// Deterministic random weights of `dtype` (F32/F16/BF16): small uniform values, norms near one;
// q/k/v biases only with `attention_bias`, no other biases.
std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed, bool attention_bias);

// `inner` under more names: a tensor asked for as `name` is inner's `name`, else the first of
// aliases(name) inner has (DeepSeek-V4's checkpoints name their tensors in the released layout
// or in transformers'). `inner` must outlive it.
std::unique_ptr<WeightSource> make_aliased_source(
    WeightSource& inner, std::function<std::vector<std::string>(const std::string&)> aliases);

// HF tensor name → GGUF tensor name in a file of general.architecture `arch` (llama, qwen2,
// qwen3, gemma3); empty if unmapped.
std::string gguf_name_for(const std::string& hf_name, const std::string& arch);

}  // namespace kestrel
