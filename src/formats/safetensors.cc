#include "formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kestrel {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A header larger than this is certainly corrupt (real ones are a few MB at most).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Expected<json> parse_json(const char* begin, const char* end) {
  try {
    return json::parse(begin, end);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for huge numbers
    return make_error("invalid JSON header: {}", e.what());
  }
}

Expected<uint64_t> read_offset(const json& v, const std::string& name) {
  if (!v.is_number_unsigned())
    return make_error("tensor '{}': data_offsets must be non-negative integers", name);
  return v.get<uint64_t>();
}

Expected<SafetensorsEntry> parse_entry(const std::string& name, const json& info,
                                       uint64_t data_size) {
  if (!info.is_object()) return make_error("tensor '{}': entry is not an object", name);
  SafetensorsEntry e;
  e.name = name;

  auto dt = info.find("dtype");
  if (dt == info.end() || !dt->is_string())
    return make_error("tensor '{}': missing or non-string 'dtype'", name);
  const auto& dtype_str = dt->get_ref<const std::string&>();
  auto dtype = dtype_from_safetensors(dtype_str);
  if (!dtype) return make_error("tensor '{}': unknown dtype '{}'", name, dtype_str);
  e.dtype = *dtype;

  auto sh = info.find("shape");
  if (sh == info.end() || !sh->is_array())
    return make_error("tensor '{}': missing or non-array 'shape'", name);
  // Element count with overflow checks: a corrupt shape must not wrap around to a small size.
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return make_error("tensor '{}': shape must hold non-negative integers (dim {} is not)", name,
                        e.shape.size());
    uint64_t dim = d.get<uint64_t>();
    if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim)
      return make_error("tensor '{}': shape is too large (element count overflows)", name);
    numel *= dim;
    e.shape.push_back(int64_t(dim));
  }

  auto off = info.find("data_offsets");
  if (off == info.end() || !off->is_array() || off->size() != 2)
    return make_error("tensor '{}': 'data_offsets' must be an array [begin, end]", name);
  KASSIGN(e.begin, read_offset((*off)[0], name));
  KASSIGN(e.end, read_offset((*off)[1], name));
  if (e.begin > e.end)
    return make_error("tensor '{}': data_offsets begin {} > end {}", name, e.begin, e.end);
  if (e.end > data_size)
    return make_error("tensor '{}': data_offsets [{}, {}] out of range (data section is {} bytes)",
                      name, e.begin, e.end, data_size);

  uint64_t elem_bytes = dtype_info(e.dtype).block_bytes;
  if (numel > std::numeric_limits<uint64_t>::max() / elem_bytes)
    return make_error("tensor '{}': shape is too large (byte size overflows)", name);
  if (numel * elem_bytes != e.end - e.begin)
    return make_error("tensor '{}': size mismatch: shape {} of {} needs {} bytes, offsets give {}",
                      name, fmt::join(e.shape, "x"), dtype_str, numel * elem_bytes,
                      e.end - e.begin);
  return e;
}

}  // namespace

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  KASSIGN(auto mapped, MappedFile::open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = std::move(mapped);
  f->bytes_ = f->file_->data();
  f->size_ = f->file_->size();
  Status st = f->parse_header();
  if (!st.ok()) return make_error("{}: {}", path, st.message());
  return f;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* bytes,
                                                                  size_t size) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->bytes_ = bytes;
  f->size_ = size;
  KTRY(f->parse_header());
  return f;
}

Status SafetensorsFile::parse_header() {
  if (size_ < 8) return make_error("file too small ({} bytes) to hold the header length", size_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes_[i];  // little-endian
  if (n > size_ - 8)
    return make_error("header length {} exceeds the file size {} minus 8", n, size_);
  if (n > kMaxHeaderBytes)
    return make_error("header length {} exceeds the {} byte limit", n, kMaxHeaderBytes);
  data_offset_ = 8 + n;
  const uint64_t data_size = size_ - data_offset_;

  const char* text = reinterpret_cast<const char*>(bytes_ + 8);
  KASSIGN(json header, parse_json(text, text + n));
  if (!header.is_object()) return make_error("header JSON is not an object");

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return make_error("'__metadata__' is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return make_error("'__metadata__' value '{}' is not a string", mk);
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    KASSIGN(auto entry, parse_entry(key, value, data_size));
    index_[key] = entries_.size();
    entries_.push_back(std::move(entry));
  }

  // Overlap check over byte ranges sorted by start; empty tensors occupy no bytes.
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : entries_)
    if (e.end > e.begin) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end)
      return make_error("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", sorted[i - 1]->name,
                        sorted[i - 1]->begin, sorted[i - 1]->end, sorted[i]->name, sorted[i]->begin,
                        sorted[i]->end);
  }
  return Status::Ok();
}

Expected<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    return make_error("tensor '{}' not found in {}", name, file_ ? file_->path() : "buffer");
  const SafetensorsEntry& e = entries_[it->second];
  if (e.shape.size() > size_t(kMaxDims))
    return make_error("tensor '{}' has {} dims; at most {} are supported", name, e.shape.size(),
                      kMaxDims);
  return Tensor{bytes_ + data_offset_ + e.begin, e.dtype, Shape::from(e.shape)};
}

Expected<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open_dir(
    const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error("'{}' is not a directory", dir);
  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  ck->dir_ = dir;
  const fs::path root(dir);

  // msModelSlim names its files quant_model_weight[s][_<type>][-NNNNN-of-NNNNN].safetensors,
  // with an index of the same stem when sharded (its writer's default name is
  // quant_model_weight_<quant type>.safetensors).
  std::vector<fs::path> modelslim, modelslim_index;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("quant_model_weight")) continue;
    if (name.ends_with(".safetensors")) modelslim.push_back(it->path());
    if (name.ends_with(".safetensors.index.json")) modelslim_index.push_back(it->path());
  }
  if (ec) return make_error("cannot list '{}': {}", dir, ec.message());
  fs::path index_path = root / "model.safetensors.index.json";
  if (!fs::exists(index_path, ec) && modelslim_index.size() > 1)
    return make_error("'{}' has {} msModelSlim index files; keep one", dir, modelslim_index.size());
  if (!fs::exists(index_path, ec) && modelslim_index.size() == 1) index_path = modelslim_index[0];
  if (fs::exists(index_path, ec)) {
    KASSIGN(std::string text, read_text_file(index_path.string()));
    auto index = parse_json(text.data(), text.data() + text.size());
    if (!index.ok()) return make_error("{}: {}", index_path.string(), index.error().message);
    auto wm = index->find("weight_map");
    if (!index->is_object() || wm == index->end() || !wm->is_object() || wm->empty())
      return make_error("{}: missing or empty 'weight_map' object", index_path.string());
    std::map<std::string, size_t> shard_index;
    for (const auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        return make_error("{}: shard of tensor '{}' is not a string", index_path.string(), name);
      const auto& shard_name = shard.get_ref<const std::string&>();
      auto [it, inserted] = shard_index.emplace(shard_name, ck->files_.size());
      if (inserted) {
        const fs::path shard_path = root / shard_name;
        if (!fs::exists(shard_path, ec))
          return make_error("{}: shard '{}' does not exist", index_path.string(), shard_name);
        KASSIGN(auto file, SafetensorsFile::open(shard_path.string()));
        ck->files_.push_back(std::move(file));
      }
      if (!ck->files_[it->second]->contains(name))
        return make_error("{}: tensor '{}' is listed in shard '{}' but absent from it",
                          index_path.string(), name, shard_name);
      ck->where_[name] = it->second;
    }
    return ck;
  }

  std::vector<fs::path> paths;
  if (fs::exists(root / "model.safetensors", ec)) {
    paths.push_back(root / "model.safetensors");
  } else if (!modelslim.empty()) {
    paths = modelslim;
    std::sort(paths.begin(), paths.end());
  } else {
    // Error-code iteration: the throwing overloads would let exceptions escape.
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".safetensors") paths.push_back(it->path());
    if (ec) return make_error("cannot list '{}': {}", dir, ec.message());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) return make_error("no .safetensors files in '{}'", dir);
  for (const auto& p : paths) {
    KASSIGN(auto file, SafetensorsFile::open(p.string()));
    for (const auto& e : file->entries()) {
      if (ck->where_.count(e.name))
        return make_error("tensor '{}' appears in both '{}' and '{}'", e.name,
                          paths[ck->where_[e.name]].string(), p.string());
      ck->where_[e.name] = ck->files_.size();
    }
    ck->files_.push_back(std::move(file));
  }
  return ck;
}

Expected<Tensor> SafetensorsCheckpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return make_error("tensor '{}' not found in checkpoint {}", name, dir_);
  return files_[it->second]->tensor(name);
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, idx] : where_) out.push_back(name);
  return out;
}

}  // namespace kestrel
