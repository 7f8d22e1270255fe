// formats/gguf.h — GGUF v2/v3 reader: typed metadata, tensor infos, tensor data views (mmap'ed).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/mmap_file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace kestrel {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

struct GgufValue;
// An array keeps its element type; nested arrays are allowed.
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  GgufType type = GgufType::U8;
  // Integers of any width are held as int64/uint64, floats as double.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  std::optional<int64_t> as_int() const;   // any integer type (and bool)
  std::optional<double> as_float() const;  // any numeric type
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] innermost
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  uint64_t offset = 0;  // relative to the data section
};

class GgufFile {
 public:
  // Parses header, metadata and tensor infos; validates every tensor lies inside the file.
  static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Same, over bytes already in memory (used by the fuzzer and tests); `bytes` must outlive it.
  static Expected<std::unique_ptr<GgufFile>> parse(const uint8_t* bytes, size_t size);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  // String / numeric arrays (empty optional when missing or of another type).
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;
  std::optional<std::vector<double>> get_float_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // A view with the shape in PyTorch order (ne reversed): a [out, in] weight has ne = {in, out}.
  Expected<Tensor> tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  Status parse_all();

  std::shared_ptr<MappedFile> file_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kestrel
