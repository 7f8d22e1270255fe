// model/rope_table.h — RoPE frequencies for a model config, with the HF scaling rules
// (linear, dynamic NTK, llama3, YaRN).
#pragma once

#include <optional>
#include <vector>

#include "model/config.h"

namespace kestrel {

struct RopeTable {
  std::vector<float> inv_freq;  // rot_dim / 2 entries
  float attention_factor = 1.0f;
  int rot_dim = 0;
  bool interleaved = false;
};

// `freq_divisors` (GGUF rope_freqs.weight) replaces the llama3 rule when given: llama.cpp's
// converter bakes the llama3 scaling into per-frequency divisors.
// Dynamic NTK uses the static form vLLM uses (base scaled for max_position_embeddings × factor),
// not HF's history-dependent recomputation.
RopeTable make_rope_table(const ModelConfig& cfg,
                          const std::optional<std::vector<float>>& freq_divisors = std::nullopt);

}  // namespace kestrel
