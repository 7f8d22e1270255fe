#include "tensor/dtype.h"

#include <array>

namespace kestrel {

const DTypeInfo& dtype_info(DType t) {
  static const std::array<DTypeInfo, 24> kInfo = {{
      {"f32", 1, 4, false},     {"f16", 1, 2, false},     {"bf16", 1, 2, false},
      {"f64", 1, 8, false},     {"f8_e4m3", 1, 1, false}, {"f8_e5m2", 1, 1, false},
      {"i8", 1, 1, false},      {"u8", 1, 1, false},      {"i16", 1, 2, false},
      {"i32", 1, 4, false},     {"i64", 1, 8, false},     {"bool", 1, 1, false},
      {"q4_0", 32, 18, true},   {"q4_1", 32, 20, true},   {"q5_0", 32, 22, true},
      {"q5_1", 32, 24, true},   {"q8_0", 32, 34, true},   {"q8_1", 32, 36, true},
      {"q4_k", 256, 144, true}, {"q5_k", 256, 176, true}, {"q6_k", 256, 210, true},
      {"q8_k", 256, 292, true}, {"mxfp8", 32, 33, false}, {"mxfp4", 32, 17, true},
  }};
  return kInfo[size_t(t)];
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::F32;
    case 1:
      return DType::F16;
    case 2:
      return DType::Q4_0;
    case 3:
      return DType::Q4_1;
    case 6:
      return DType::Q5_0;
    case 7:
      return DType::Q5_1;
    case 8:
      return DType::Q8_0;
    case 9:
      return DType::Q8_1;
    case 12:
      return DType::Q4_K;
    case 13:
      return DType::Q5_K;
    case 14:
      return DType::Q6_K;
    case 15:
      return DType::Q8_K;
    case 24:
      return DType::I8;
    case 25:
      return DType::I16;
    case 26:
      return DType::I32;
    case 27:
      return DType::I64;
    case 28:
      return DType::F64;
    case 30:
      return DType::BF16;
    case 39:
      return DType::MXFP4;
    default:
      return std::nullopt;
  }
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "F64") return DType::F64;
  if (s == "F8_E4M3") return DType::F8_E4M3;
  if (s == "F8_E5M2") return DType::F8_E5M2;
  if (s == "I8") return DType::I8;
  if (s == "U8") return DType::U8;
  if (s == "I16") return DType::I16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  if (s == "BOOL") return DType::BOOL;
  return std::nullopt;
}

}  // namespace kestrel
