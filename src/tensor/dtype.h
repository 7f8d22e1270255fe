// tensor/dtype.h — element types: plain floats/ints and GGUF block-quantized formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kestrel {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F64,
  F8_E4M3,
  F8_E5M2,
  I8,
  U8,
  I16,
  I32,
  I64,
  BOOL,
  // GGUF block quantizations (blocks run along the innermost axis).
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q8_1,
  Q4_K,
  Q5_K,
  Q6_K,
  Q8_K,
  // OCP MXFP8 as a KV cache row format: 32 values take 33 bytes (32 E4M3 codes and one E8M0
  // scale); where a cached row keeps its scales: backend/cpu/cache_rows.h.
  MXFP8,
  // OCP MXFP4 as ggml stores it (GGUF type 39): per 32 values one E8M0 exponent byte, then 16
  // bytes of E2M1 codes, element j in the low nibble of byte j and j + 16 in the high one.
  MXFP4,
};

struct DTypeInfo {
  std::string_view name;
  int block_elems;  // elements per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;   // a GGUF block format
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}

// Bytes of n elements (n must be a multiple of the block size for quantized types).
inline size_t dtype_bytes(DType t, int64_t n) {
  const auto& i = dtype_info(t);
  return size_t(n / i.block_elems) * size_t(i.block_bytes);
}

// ggml type ids <-> DType. Unknown or unsupported ids give nullopt.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...).
std::optional<DType> dtype_from_safetensors(std::string_view s);

}  // namespace kestrel
