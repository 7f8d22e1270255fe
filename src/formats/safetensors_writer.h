// formats/safetensors_writer.h — writes one safetensors file, tensor by tensor: the header (every
// tensor's dtype, shape and byte range, known before any data) goes first, then each tensor's
// bytes as its writer produces them, so a checkpoint is converted without holding it in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace kestrel {

struct SafetensorsOut {
  std::string name;
  DType dtype = DType::F32;  // F32, F16, BF16, I8, I32, I64, U8
  std::vector<int64_t> shape;
  // Fills exactly numel · dtype bytes (called once, in order).
  std::function<void(std::span<uint8_t>)> write;
};

Status write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors);

}  // namespace kestrel
