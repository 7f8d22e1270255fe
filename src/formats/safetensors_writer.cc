#include "formats/safetensors_writer.h"

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

namespace kestrel {

namespace {

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    default:
      return nullptr;
  }
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  std::vector<size_t> sizes;
  for (const SafetensorsOut& t : tensors) {
    const char* dtype = safetensors_dtype(t.dtype);
    if (dtype == nullptr)
      return make_error("{}: tensor {} has dtype {}, which safetensors files here do not hold",
                        path, t.name, dtype_name(t.dtype));
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const size_t bytes = dtype_bytes(t.dtype, numel);
    header[t.name] = {
        {"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return make_error("cannot write {}", path);
  const uint64_t n = text.size();
  bool ok = std::fwrite(&n, 8, 1, f.get()) == 1 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  std::vector<uint8_t> buf;
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    buf.assign(sizes[i], 0);
    tensors[i].write(buf);
    ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
  }
  if (!ok || std::fflush(f.get()) != 0) return make_error("writing {} failed", path);
  return Status::Ok();
}

}  // namespace kestrel
