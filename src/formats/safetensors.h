// formats/safetensors.h — safetensors reader: one file or a sharded set
// (model.safetensors.index.json).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace kestrel {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;   // PyTorch order
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

class SafetensorsFile {
 public:
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Over bytes already in memory (fuzzer, tests); `bytes` must outlive the object.
  static Expected<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* bytes, size_t size);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  Expected<Tensor> tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  Status parse_header();

  std::shared_ptr<MappedFile> file_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards named by
// model.safetensors.index.json, or (fallback) every *.safetensors file in the directory.
class SafetensorsCheckpoint {
 public:
  static Expected<std::unique_ptr<SafetensorsCheckpoint>> open_dir(const std::string& dir);

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // Clear error naming the tensor and the checkpoint when it is missing.
  Expected<Tensor> tensor(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

}  // namespace kestrel
