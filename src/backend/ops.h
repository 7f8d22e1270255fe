// backend/ops.h — the parameter structs of the backend's ops (backend/backend.h), neutral to
// where they run: plain views of memory in the backend's space (host memory on the CPU, device
// memory on a GPU) and the numbers that configure each op. Every backend reads the same structs.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace kestrel {

// How quantized weights meet the activations.
enum class QuantCompute {
  kInt8,  // activations quantized per block to Q8_0/Q8_1/Q8_K, integer dot products (llama.cpp)
  kF32,   // each weight block dequantized to f32 and multiplied with the f32 activations
};

// One weight of a linear_group: y[m, N] = x[m, K] · wᵀ.
struct LinearJob {
  const Tensor* w;
  float* y;
};

// Rotary position embedding of [tokens, heads, head_dim] rows.
struct RopeParams {
  const float* inv_freq = nullptr;  // rot_dim / 2 frequencies
  int rot_dim = 0;                  // rotated width at the start of each head (≤ head_dim)
  float attention_factor = 1.0f;    // multiplies cos and sin (YaRN)
  bool interleaved = false;         // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  // BF16/F16: cos, sin, both products and the sum are rounded to that dtype, as a model with
  // activations of that dtype computes them.
  DType act = DType::F32;
};

// One layer's paged K/V cache: [num_blocks, block_size, num_kv_heads, head_dim] for K and for
// V, in f32, f16 or bf16; a sequence's token at position p lives in block
// block_table[p / block_size], row p % block_size.
struct KVLayer {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::F32;  // F32, F16 or BF16
  int64_t num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// One layer's MLA cache of latents: [num_blocks, block_size, latent_dim + rope_dim], each row
// [c | kpe] (the normalized latent and the roped shared key), paged like KVLayer.
struct MlaCacheLayer {
  void* data = nullptr;
  DType dtype = DType::F32;  // F32, F16 or BF16
  int64_t num_blocks = 0;
  int block_size = 16;
  int latent_dim = 0;
  int rope_dim = 0;
};

// The attention view of a flat batch of tokens from several sequences.
struct AttentionBatch {
  int64_t num_tokens = 0;
  int num_seqs = 0;
  const int32_t* positions = nullptr;        // [num_tokens]
  const int64_t* slot_mapping = nullptr;     // [num_tokens] block * block_size + row
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] tokens of seq s: [qsl[s], qsl[s+1])
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
};

}  // namespace kestrel
