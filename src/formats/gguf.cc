#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

namespace kestrel {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
// Nested arrays recurse; a cap keeps a hostile file from exhausting the stack.
constexpr int kMaxArrayDepth = 16;
// Array elements over all metadata. A parsed value is ~50 bytes but may take 1 byte in the file;
// the cap bounds that blow-up (real vocabularies hold a few hundred thousand strings).
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 24;
constexpr uint32_t kMaxAlignment = uint32_t(1) << 30;

// Keys and names come from the file: clip them so an error message stays readable.
std::string clip(std::string_view s) {
  constexpr size_t kMax = 80;
  if (s.size() <= kMax) return std::string(s);
  return std::string(s.substr(0, kMax)) + "...";
}

// Smallest encoded size of one value of `t`, used to bound counts before allocating.
size_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
    case GgufType::STRING:
      return 8;  // the length prefix
    case GgufType::ARRAY:
      return 12;  // element type + count
  }
  return 1;
}

bool valid_type(uint32_t t) {
  return t <= uint32_t(GgufType::F64);
}

// Little-endian cursor over the file; every read checks the remaining length first.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size) : p_(p), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, p_ + pos_, sizeof(T));  // x86-64 and the format are both little-endian
    pos_ += sizeof(T);
    return true;
  }

  bool read_string(std::string* out) {
    uint64_t len = 0;
    if (!read(&len) || len > remaining()) return false;
    out->assign(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return true;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
};

// Parses one value of type `type` for metadata key `key` (used only in messages).
class ValueParser {
 public:
  // `elements_left` is the file-wide array element budget, shared by all keys.
  ValueParser(Reader& r, const std::string& key, uint64_t& elements_left)
      : r_(r), key_(key), elements_left_(elements_left) {}

  Expected<GgufValue> parse(GgufType type, int depth) {
    const size_t start = r_.pos();
    GgufValue out;
    out.type = type;
    bool ok = true;
    switch (type) {
      case GgufType::U8:
        ok = read_as<uint8_t, uint64_t>(&out);
        break;
      case GgufType::I8:
        ok = read_as<int8_t, int64_t>(&out);
        break;
      case GgufType::U16:
        ok = read_as<uint16_t, uint64_t>(&out);
        break;
      case GgufType::I16:
        ok = read_as<int16_t, int64_t>(&out);
        break;
      case GgufType::U32:
        ok = read_as<uint32_t, uint64_t>(&out);
        break;
      case GgufType::I32:
        ok = read_as<int32_t, int64_t>(&out);
        break;
      case GgufType::U64:
        ok = read_as<uint64_t, uint64_t>(&out);
        break;
      case GgufType::I64:
        ok = read_as<int64_t, int64_t>(&out);
        break;
      case GgufType::F32:
        ok = read_as<float, double>(&out);
        break;
      case GgufType::F64:
        ok = read_as<double, double>(&out);
        break;
      case GgufType::BOOL: {
        uint8_t b = 0;
        ok = r_.read(&b);
        out.v = b != 0;
        break;
      }
      case GgufType::STRING: {
        std::string s;
        ok = r_.read_string(&s);
        out.v = std::move(s);
        break;
      }
      case GgufType::ARRAY:
        return parse_array(depth, start);
    }
    if (!ok) return truncated(start);
    return out;
  }

 private:
  template <typename Stored, typename Held>
  bool read_as(GgufValue* out) {
    Stored x{};
    if (!r_.read(&x)) return false;
    out->v = Held(x);
    return true;
  }

  Error truncated(size_t at) const {
    return make_error("GGUF: truncated metadata value for key '{}' at offset {}", clip(key_), at);
  }

  Expected<GgufValue> parse_array(int depth, size_t start) {
    if (depth >= kMaxArrayDepth) {
      return make_error("GGUF: metadata key '{}' nests arrays deeper than {} levels", clip(key_),
                        kMaxArrayDepth);
    }
    uint32_t elem = 0;
    uint64_t count = 0;
    if (!r_.read(&elem) || !r_.read(&count)) return truncated(start);
    if (!valid_type(elem)) {
      return make_error(
          "GGUF: metadata key '{}' has an array of unknown value type {} at offset {}", clip(key_),
          elem, start);
    }
    const auto elem_type = GgufType(elem);
    // Each element takes at least min_encoded_size bytes, so a count the rest of the file cannot
    // hold is corrupt; checking first keeps reserve() bounded by the file size.
    if (count > r_.remaining() / min_encoded_size(elem_type)) {
      return make_error(
          "GGUF: metadata key '{}' declares {} array elements at offset {} but only {} bytes "
          "remain (truncated or corrupt file)",
          clip(key_), count, start, r_.remaining());
    }
    if (count > elements_left_) {
      return make_error("GGUF: metadata arrays hold more than {} elements in all (key '{}')",
                        kMaxArrayElements, clip(key_));
    }
    elements_left_ -= count;
    auto arr = std::make_shared<GgufArray>();
    arr->elem_type = elem_type;
    arr->items.reserve(size_t(count));
    for (uint64_t i = 0; i < count; ++i) {
      KASSIGN(GgufValue item, parse(elem_type, depth + 1));
      arr->items.push_back(std::move(item));
    }
    GgufValue out;
    out.type = GgufType::ARRAY;
    out.v = std::move(arr);
    return out;
  }

  Reader& r_;
  const std::string& key_;
  uint64_t& elements_left_;
};

}  // namespace

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const {
  return std::get_if<std::string>(&v);
}

const GgufArray* GgufValue::as_array() const {
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v);
  return a ? a->get() : nullptr;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  KASSIGN(auto mapped, MappedFile::open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = mapped->data();
  f->size_ = mapped->size();
  f->file_ = std::move(mapped);
  Status st = f->parse_all();
  if (!st.ok()) return make_error("{}: {}", path, st.message());
  return f;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* bytes, size_t size) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  f->size_ = size;
  KTRY(f->parse_all());
  return f;
}

Status GgufFile::parse_all() {
  Reader r(bytes_, size_);
  char magic[4] = {};
  if (!r.read(&magic)) return make_error("GGUF: file too short for the magic ({} bytes)", size_);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return make_error("GGUF: not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x})",
                      uint8_t(magic[0]), uint8_t(magic[1]), uint8_t(magic[2]), uint8_t(magic[3]));
  }
  if (!r.read(&version_)) return make_error("GGUF: truncated header (version)");
  if (version_ == 1) {
    return make_error(
        "GGUF: version 1 is not supported (it uses 32-bit counts); re-convert the model with a "
        "current gguf writer");
  }
  if (version_ != 2 && version_ != 3) {
    // A big-endian file reads as a byte-swapped small version here.
    if (version_ == 0x02000000u || version_ == 0x03000000u) {
      return make_error("GGUF: big-endian files are not supported");
    }
    return make_error("GGUF: unsupported version {} (supported: 2, 3)", version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (!r.read(&n_tensors) || !r.read(&n_kv)) return make_error("GGUF: truncated header (counts)");

  uint64_t elements_left = kMaxArrayElements;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = r.pos();
    std::string key;
    if (!r.read_string(&key)) {
      return make_error("GGUF: truncated metadata key #{} at offset {}", i, at);
    }
    uint32_t type = 0;
    if (!r.read(&type)) {
      return make_error("GGUF: truncated value type for key '{}' at offset {}", clip(key), r.pos());
    }
    if (!valid_type(type)) {
      return make_error("GGUF: metadata key '{}' has unknown value type {}", clip(key), type);
    }
    ValueParser vp(r, key, elements_left);
    KASSIGN(GgufValue value, vp.parse(GgufType(type), 0));
    auto [it, inserted] = metadata_.try_emplace(std::move(key), std::move(value));
    if (!inserted) return make_error("GGUF: duplicate metadata key '{}'", clip(it->first));
  }

  if (const GgufValue* a = find("general.alignment")) {
    const auto v = a->as_int();
    if (!v || *v <= 0 || *v % 8 != 0 || *v > kMaxAlignment) {
      return make_error("GGUF: general.alignment must be a positive multiple of 8 (at most {})",
                        kMaxAlignment);
    }
    alignment_ = uint32_t(*v);
  } else {
    alignment_ = kDefaultAlignment;
  }

  // A tensor info takes at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes, which
  // bounds the reservation however large the declared count.
  tensors_.reserve(size_t(std::min<uint64_t>(n_tensors, r.remaining() / 24)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = r.pos();
    GgufTensorInfo t;
    if (!r.read_string(&t.name)) {
      return make_error("GGUF: truncated tensor info #{} (name) at offset {}", i, at);
    }
    const std::string name = clip(t.name);
    uint32_t n_dims = 0;
    if (!r.read(&n_dims)) {
      return make_error("GGUF: truncated tensor info '{}' at offset {}", name, r.pos());
    }
    if (n_dims > uint32_t(kMaxDims)) {
      return make_error("GGUF: tensor '{}' has {} dimensions (at most {} supported)", name, n_dims,
                        kMaxDims);
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      if (!r.read(&dim)) {
        return make_error("GGUF: truncated tensor info '{}' at offset {}", name, r.pos());
      }
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, int64_t(dim), &numel)) {
        return make_error("GGUF: tensor '{}' has invalid dimension {} = {}", name, d, dim);
      }
      t.ne.push_back(int64_t(dim));
    }
    if (!r.read(&t.ggml_type) || !r.read(&t.offset)) {
      return make_error("GGUF: truncated tensor info '{}' at offset {}", name, r.pos());
    }
    const auto dtype = dtype_from_ggml(t.ggml_type);
    if (!dtype) {
      return make_error("GGUF: tensor '{}' has unsupported ggml type {}", name, t.ggml_type);
    }
    t.dtype = *dtype;
    const auto& info = dtype_info(t.dtype);
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];  // a 0-d tensor holds one element
    if (ne0 % info.block_elems != 0) {
      return make_error(
          "GGUF: tensor '{}' ({}) has ne[0] = {}, not a multiple of the block size {}", name,
          info.name, ne0, info.block_elems);
    }
    if (t.offset % alignment_ != 0) {
      return make_error("GGUF: tensor '{}' offset {} is not a multiple of the alignment {}", name,
                        t.offset, alignment_);
    }
    if (tensor_index_.count(t.name)) return make_error("GGUF: duplicate tensor '{}'", name);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Tensor data starts at the next multiple of the alignment (the bytes up to it are padding).
  const uint64_t end = r.pos();
  data_offset_ = end + (alignment_ - end % alignment_) % alignment_;
  for (const GgufTensorInfo& t : tensors_) {
    int64_t numel = 1;
    for (int64_t d : t.ne) numel *= d;  // overflow was ruled out above
    const auto& info = dtype_info(t.dtype);
    uint64_t nbytes = 0, begin = 0, stop = 0;
    if (__builtin_mul_overflow(uint64_t(numel / info.block_elems), uint64_t(info.block_bytes),
                               &nbytes) ||
        __builtin_add_overflow(data_offset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, nbytes, &stop) || stop > size_) {
      return make_error(
          "GGUF: tensor '{}' data [{}, +{}) lies outside the file (data section at {}, file size "
          "{})",
          clip(t.name), t.offset, nbytes, data_offset_, size_);
    }
  }
  return Status::Ok();
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  const std::string* s = v ? v->as_string() : nullptr;
  return s ? std::optional<std::string>(*s) : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  const GgufArray* a = v ? v->as_array() : nullptr;
  if (!a || a->elem_type != GgufType::STRING) return std::nullopt;
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const GgufValue& item : a->items) out.push_back(*item.as_string());
  return out;
}

std::optional<std::vector<double>> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  const GgufArray* a = v ? v->as_array() : nullptr;
  if (!a) return std::nullopt;
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const GgufValue& item : a->items) {
    const auto x = item.as_float();
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  const GgufArray* a = v ? v->as_array() : nullptr;
  if (!a) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (const GgufValue& item : a->items) {
    const auto x = item.as_int();
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Expected<Tensor> GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) return make_error("GGUF: no tensor named '{}'", clip(name));
  Tensor out;
  out.data = bytes_ + data_offset_ + t->offset;
  out.dtype = t->dtype;
  out.shape.ndim = int(t->ne.size());
  for (size_t i = 0; i < t->ne.size(); ++i) out.shape.dims[t->ne.size() - 1 - i] = t->ne[i];
  return out;
}

}  // namespace kestrel
