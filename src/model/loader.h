// model/loader.h — turns a user's --model argument (a checkpoint directory, a .gguf file, or
// either with --load-format dummy) into a ready CausalLM on a backend.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "distributed/device_comm.h"
#include "formats/gguf.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace kestrel {

struct LoadOptions {
  std::string model;                 // directory with config.json, or a .gguf file
  std::string load_format = "auto";  // auto | safetensors | gguf | dummy
  // Activation precision (and dummy weights' dtype): auto = the config's torch_dtype
  // (f32 if none) | float32 | bfloat16 | float16.
  std::string dtype = "auto";
  // KV cache storage: auto (the activation dtype; f16 for GGUF files, as llama.cpp; int8 for an
  // msModelSlim C8 checkpoint) | float32 | fp32 | bfloat16 | bf16 | float16 | fp16 | fp8 |
  // fp8_e4m3 | fp8_e5m2 | mxfp8 | int8 (model/kv_scales.h).
  std::string kv_cache_dtype = "auto";
  bool calculate_kv_scales = false;  // FP8 caches without checkpoint scales: from the first batch
  uint64_t seed = 0;                 // dummy weights
  int threads = 0;                   // compute threads, 0 = all cores
  bool pin_threads = false;          // bind each compute thread to one CPU (ThreadPool)
  // Quantized weights: int8 (activations quantized per block, as llama.cpp) | f32 (weight
  // blocks dequantized against f32 activations, as a dequantized reference computes).
  std::string quant_compute = "int8";
  // --quantization: empty (the checkpoint says), ascend (an msModelSlim checkpoint, which must
  // have its quant_model_description.json), fp8 (DeepSeek's block-quantized FP8).
  std::string quantization;
  // This instance is a PD decode instance (kv_consumer): msModelSlim's W8A8_MIX layers run
  // their static scheme, as vLLM-Ascend's decode nodes do (ModelSlimDescription::mix_static).
  bool pd_decode = false;
  // Run on this backend (another model's: a draft model shares its target's threads) instead of
  // a new one; threads, pin_threads and quant_compute are then the backend's.
  Backend* shared_backend = nullptr;
  // This process's part of a tensor-parallel group (size 1: the whole model).
  int tp_rank = 0, tp_size = 1;
  DeviceComm* tp_comm = nullptr;
  // Each rank holds whole routed experts (--enable-expert-parallel) instead of every expert's
  // features, spread over the tp_size ranks of each of the dp_size data-parallel groups; with
  // dp_size > 1 the ranks of this TP index exchange routed rows over ep_comm (one member per
  // data-parallel rank, model/expert_exchange.h). Ignored for a dense model, and with one rank.
  bool expert_parallel = false;
  int dp_rank = 0, dp_size = 1;
  DeviceComm* ep_comm = nullptr;
};

struct LoadedModel {
  std::string path;
  ModelConfig config;
  GenerationDefaults generation;
  std::unique_ptr<GgufFile> gguf;  // set for GGUF models (tensors and the vocab live in it)
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Backend> backend;  // null when it runs on LoadOptions::shared_backend
  std::unique_ptr<CausalLM> model;   // declared last: destroyed first
};

Expected<std::unique_ptr<LoadedModel>> load_model(const LoadOptions& opts);

// The model's configuration alone (config.json, or a GGUF file's metadata), for decisions made
// before loading (whether it is a MoE model).
Expected<ModelConfig> read_model_config(const std::string& model, const std::string& load_format);

}  // namespace kestrel
