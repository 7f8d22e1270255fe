// GGUF reader and GGUF -> ModelConfig. Fixtures come from tools/make_gguf_fixture.py (gguf-py), so
// the metadata values below are the ones that tool writes; corrupt inputs are built here.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::string fixture(const std::string& name) {
  return test::fixtures_dir() + "/gguf/" + name;
}

std::string read_bytes(const std::string& path) {
  auto s = read_text_file(path);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? *s : std::string();
}

Expected<std::unique_ptr<GgufFile>> parse(const std::string& bytes) {
  return GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Serializes a GGUF file byte by byte, straight from the format description (models.md §8.1).
class Builder {
 public:
  Builder& u8(uint8_t v) { return raw(&v, 1); }
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& f32(float v) { return raw(&v, 4); }
  Builder& str(const std::string& s) {
    u64(s.size());
    bytes_ += s;
    return *this;
  }
  Builder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes_ += "GGUF";
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Builder& kv_u64(const std::string& key, uint64_t v) { return str(key).u32(10).u64(v); }
  Builder& kv_f32(const std::string& key, float v) { return str(key).u32(6).f32(v); }
  Builder& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  Builder& kv_str_array(const std::string& key, const std::vector<std::string>& v) {
    str(key).u32(9).u32(8).u64(v.size());
    for (const std::string& s : v) str(s);
    return *this;
  }
  Builder& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                  uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Builder& pad(size_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back('\0');
    return *this;
  }
  Builder& zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Builder& raw(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string bytes_;
};

// One F32 tensor "t" of ne = {8, 2} (64 bytes) at data offset `offset`.
std::string one_tensor_file(std::vector<uint64_t> ne = {8, 2}, uint32_t type = 0,
                            uint64_t offset = 0, size_t data_bytes = 64) {
  Builder b;
  b.header(3, 1, 1).kv_str("general.architecture", "test").tensor("t", ne, type, offset);
  return b.pad(32).zeros(data_bytes).bytes();
}

void expect_error(const std::string& bytes, const std::string& fragment) {
  auto r = parse(bytes);
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().message;
}

TEST(Gguf, ReadsEveryMetadataType) {
  auto r = GgufFile::open(fixture("quant_types.gguf"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& g = **r;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.get_string("general.architecture"), "test");

  EXPECT_EQ(g.find("test.u8")->type, GgufType::U8);
  EXPECT_EQ(g.get_int("test.u8"), 200);
  EXPECT_EQ(g.get_int("test.i8"), -100);
  EXPECT_EQ(g.get_int("test.u16"), 60000);
  EXPECT_EQ(g.get_int("test.i16"), -30000);
  EXPECT_EQ(g.get_int("test.u32"), 4000000000LL);
  EXPECT_EQ(g.find("test.i32")->type, GgufType::I32);
  EXPECT_EQ(g.get_int("test.i32"), -2000000000LL);
  EXPECT_EQ(g.get_int("test.u64"), 123456789012LL);
  EXPECT_EQ(g.find("test.u64")->type, GgufType::U64);
  EXPECT_EQ(g.get_int("test.i64"), -(int64_t(1) << 62) - 3);
  // 2^63 + 5 does not fit int64: no int, but the exact uint64 is kept.
  EXPECT_FALSE(g.get_int("test.u64_huge").has_value());
  EXPECT_EQ(std::get<uint64_t>(g.find("test.u64_huge")->v), (uint64_t(1) << 63) + 5);
  EXPECT_EQ(g.get_float("test.f32"), 0.15625);
  EXPECT_EQ(g.find("test.f32")->type, GgufType::F32);
  EXPECT_EQ(g.get_float("test.f64"), 3.141592653589793);
  EXPECT_EQ(g.get_float("test.u32"), 4e9);  // integers read as floats too
  EXPECT_EQ(g.get_bool("test.bool_true"), true);
  EXPECT_EQ(g.get_bool("test.bool_false"), false);
  EXPECT_EQ(g.get_string("test.string"),
            "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xe2\x9c\x93 "
            "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e");
  EXPECT_EQ(g.get_string("test.empty_string"), "");

  // Getters of the wrong kind give nothing.
  EXPECT_FALSE(g.get_int("test.string").has_value());
  EXPECT_FALSE(g.get_string("test.u8").has_value());
  EXPECT_FALSE(g.get_bool("test.u8").has_value());
  EXPECT_FALSE(g.get_float("test.string").has_value());
  EXPECT_FALSE(g.get_int("no.such.key").has_value());
  EXPECT_EQ(g.find("no.such.key"), nullptr);
}

TEST(Gguf, ReadsArrays) {
  auto r = GgufFile::open(fixture("quant_types.gguf"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& g = **r;
  EXPECT_EQ(g.get_int_array("test.arr_u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(g.find("test.arr_u8")->as_array()->elem_type, GgufType::U8);
  EXPECT_EQ(g.get_int_array("test.arr_i16"), (std::vector<int64_t>{-7, 0, 7}));
  EXPECT_EQ(g.get_int_array("test.arr_u64"), (std::vector<int64_t>{int64_t(1) << 40, 1}));
  EXPECT_EQ(g.get_int_array("test.arr_i32"), (std::vector<int64_t>{-1, 0, 2147483647}));
  EXPECT_EQ(g.get_float_array("test.arr_f32"), (std::vector<double>{0.5, -1.25, 3.0}));
  EXPECT_EQ(g.get_float_array("test.arr_f64"), (std::vector<double>{0.1, -2.5}));
  EXPECT_EQ(g.get_float_array("test.arr_i16"), (std::vector<double>{-7, 0, 7}));
  EXPECT_EQ(g.get_string_array("test.arr_string"),
            (std::vector<std::string>{"a", "\xc3\x9f", "\xe6\x97\xa5\xe6\x9c\xac", ""}));
  EXPECT_FALSE(g.get_string_array("test.arr_i32").has_value());
  EXPECT_FALSE(g.get_float_array("test.arr_string").has_value());
  EXPECT_FALSE(g.get_int_array("test.arr_f32").has_value());
  EXPECT_FALSE(g.get_int_array("test.u8").has_value());

  const GgufArray* bools = g.find("test.arr_bool")->as_array();
  ASSERT_NE(bools, nullptr);
  ASSERT_EQ(bools->items.size(), 3u);
  EXPECT_EQ(bools->elem_type, GgufType::BOOL);
  EXPECT_EQ(bools->items[0].as_bool(), true);
  EXPECT_EQ(bools->items[1].as_bool(), false);
  EXPECT_EQ(bools->items[2].as_bool(), true);

  const GgufArray* nested = g.find("test.arr_nested")->as_array();
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->elem_type, GgufType::ARRAY);
  const std::vector<std::vector<int64_t>> want = {{1, 2}, {3}, {4, 5, 6}};
  ASSERT_EQ(nested->items.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const GgufArray* inner = nested->items[i].as_array();
    ASSERT_NE(inner, nullptr);
    EXPECT_EQ(inner->elem_type, GgufType::I32);
    ASSERT_EQ(inner->items.size(), want[i].size());
    for (size_t j = 0; j < want[i].size(); ++j) EXPECT_EQ(inner->items[j].as_int(), want[i][j]);
  }
  const GgufArray* nested_s = g.find("test.arr_nested_string")->as_array();
  ASSERT_NE(nested_s, nullptr);
  ASSERT_EQ(nested_s->items.size(), 2u);
  EXPECT_EQ(*nested_s->items[1].as_array()->items[1].as_string(), "z");
  EXPECT_FALSE(g.get_int_array("test.arr_nested").has_value());
}

TEST(Gguf, TensorInfosAndViews) {
  auto r = GgufFile::open(fixture("quant_types.gguf"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const GgufFile& g = **r;
  ASSERT_EQ(g.tensors().size(), 22u);

  struct Want {
    const char* name;
    DType dtype;
    uint32_t ggml_type;
    int64_t cols;
  };
  const Want wants[] = {
      {"f16", DType::F16, 1, 256},    {"bf16", DType::BF16, 30, 256},
      {"q8_0", DType::Q8_0, 8, 256},  {"q4_0", DType::Q4_0, 2, 256},
      {"q4_1", DType::Q4_1, 3, 256},  {"q5_0", DType::Q5_0, 6, 256},
      {"q5_1", DType::Q5_1, 7, 256},  {"q4_k", DType::Q4_K, 12, 512},
      {"q5_k", DType::Q5_K, 13, 512}, {"q6_k", DType::Q6_K, 14, 512},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    const GgufTensorInfo* info = g.find_tensor(w.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->ggml_type, w.ggml_type);
    EXPECT_EQ(info->dtype, w.dtype);
    EXPECT_EQ(info->ne, (std::vector<int64_t>{w.cols, 4}));
    EXPECT_EQ(info->offset % 64, 0u);
    auto t = g.tensor(w.name);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, (Shape{4, w.cols}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);  // mmap is page aligned
    const GgufTensorInfo* exp = g.find_tensor(std::string(w.name) + ".expected");
    ASSERT_NE(exp, nullptr);
    EXPECT_EQ(exp->dtype, DType::F32);
    EXPECT_EQ(exp->ne, info->ne);
    // gguf-py lays tensors out in order, each padded to the alignment.
    EXPECT_EQ(exp->offset, info->offset + (t->nbytes() + 63) / 64 * 64);
  }

  // F32 tensors hold their flat index: the view must point at the right bytes with ne reversed.
  auto iota = g.tensor("f32.iota");
  ASSERT_TRUE(iota.ok());
  EXPECT_EQ(iota->shape, (Shape{3, 256}));
  EXPECT_EQ(g.find_tensor("f32.iota")->offset, 0u);
  for (int64_t i = 0; i < iota->numel(); ++i) ASSERT_EQ(iota->as<float>()[i], float(i));
  EXPECT_EQ(reinterpret_cast<const float*>(iota->row(2))[5], 2 * 256 + 5);
  auto iota3 = g.tensor("f32.iota3d");
  ASSERT_TRUE(iota3.ok());
  EXPECT_EQ(g.find_tensor("f32.iota3d")->ne, (std::vector<int64_t>{64, 3, 2}));
  EXPECT_EQ(iota3->shape, (Shape{2, 3, 64}));
  for (int64_t i = 0; i < iota3->numel(); ++i) ASSERT_EQ(iota3->as<float>()[i], float(i));

  EXPECT_EQ(g.find_tensor("missing.weight"), nullptr);
  auto missing = g.tensor("missing.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing.weight"), std::string::npos);
}

TEST(Gguf, OpenMissingFileNamesThePath) {
  auto r = GgufFile::open(fixture("does_not_exist.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("does_not_exist.gguf"), std::string::npos);
}

TEST(Gguf, ParseFromMemoryMatchesOpen) {
  const std::string bytes = read_bytes(fixture("quant_types.gguf"));
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->metadata().size(), 27u);  // general.architecture, general.alignment, 25 test.*
  auto t = (*r)->tensor("f32.iota");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(static_cast<const char*>(t->data) - bytes.data(), 2240);  // as gguf-py's reader says
}

// Where tensor data starts and ends in the fixture, from the views themselves.
struct DataExtent {
  size_t begin = SIZE_MAX, end = 0;
};
DataExtent data_extent(const GgufFile& g, const std::string& bytes) {
  DataExtent e;
  for (const GgufTensorInfo& info : g.tensors()) {
    auto t = g.tensor(info.name);
    const size_t off = static_cast<const char*>(t->data) - bytes.data();
    e.begin = std::min(e.begin, off);
    e.end = std::max(e.end, off + t->nbytes());
  }
  return e;
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::string bytes = read_bytes(fixture("quant_types.gguf"));
  auto full = parse(bytes);
  ASSERT_TRUE(full.ok()) << full.error().message;
  const DataExtent e = data_extent(**full, bytes);
  ASSERT_EQ(e.begin, 2240u);
  for (size_t n = 0; n <= e.begin; ++n) {
    // A copy of exactly n bytes so any read past the end is caught by ASan.
    const std::string cut = bytes.substr(0, n);
    auto r = parse(cut);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    ASSERT_FALSE(r.error().message.empty());
  }
  for (size_t n = e.begin + 1; n < e.end; n += 997) {
    auto r = parse(bytes.substr(0, n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_NE(r.error().message.find("outside the file"), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(parse(bytes.substr(0, e.end - 1)).ok());
  EXPECT_TRUE(parse(bytes.substr(0, e.end)).ok());  // trailing padding is optional
}

TEST(Gguf, TruncationMessagesSayWhere) {
  const std::string bytes = read_bytes(fixture("quant_types.gguf"));
  expect_error(bytes.substr(0, 2), "too short");
  expect_error(bytes.substr(0, 6), "truncated header");
  expect_error(bytes.substr(0, 30), "truncated metadata key #0");
  // general.architecture = "test" is the first pair: key at 24, type at 52, value at 56.
  expect_error(bytes.substr(0, 54), "truncated value type for key 'general.architecture'");
  expect_error(bytes.substr(0, 62),
               "truncated metadata value for key 'general.architecture' at offset 56");
}

TEST(Gguf, RejectsBadHeaders) {
  const std::string bytes = read_bytes(fixture("quant_types.gguf"));
  std::string bad = bytes;
  bad[0] = 'X';
  expect_error(bad, "not a GGUF file");
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    bad = bytes;
    std::memcpy(&bad[4], &version, 4);
    auto r = parse(bad);
    ASSERT_FALSE(r.ok()) << version;
  }
  std::memcpy(&bad[4], "\x01\0\0\0", 4);
  expect_error(bad, "version 1 is not supported");
  std::memcpy(&bad[4], "\x04\0\0\0", 4);
  expect_error(bad, "unsupported version 4");
  std::memcpy(&bad[4], "\0\0\0\x03", 4);
  expect_error(bad, "big-endian");

  // Version 2 has the same layout as version 3.
  bad = bytes;
  std::memcpy(&bad[4], "\x02\0\0\0", 4);
  auto v2 = parse(bad);
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  EXPECT_EQ((*v2)->version(), 2u);
}

TEST(Gguf, MinimalBuiltFileParses) {
  const std::string bytes = one_tensor_file();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->alignment(), 32u);
  auto t = (*r)->tensor("t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (Shape{2, 8}));
  EXPECT_EQ(static_cast<const char*>(t->data) - bytes.data(), int64_t(bytes.size() - 64));
}

TEST(Gguf, RejectsBadTensorInfos) {
  expect_error(one_tensor_file({8, 2, 1, 1, 1}), "has 5 dimensions");
  expect_error(one_tensor_file({8, 0}), "invalid dimension 1 = 0");
  expect_error(one_tensor_file({uint64_t(1) << 63, 1}), "invalid dimension 0");
  expect_error(one_tensor_file({uint64_t(1) << 40, uint64_t(1) << 40}), "invalid dimension 1");
  expect_error(one_tensor_file({8, 2}, 99), "unsupported ggml type 99");
  expect_error(one_tensor_file({8, 2}, 10), "unsupported ggml type 10");  // Q2_K
  expect_error(one_tensor_file({16, 2}, 2), "not a multiple of the block size 32");
  expect_error(one_tensor_file({8, 2}, 0, 16), "offset 16 is not a multiple of the alignment 32");
  expect_error(one_tensor_file({8, 2}, 0, 32), "outside the file");
  expect_error(one_tensor_file({8, 2}, 0, uint64_t(-32)), "outside the file");
  expect_error(one_tensor_file({8, 2}, 0, 0, 63), "outside the file");
  // 2^62 f64 elements: the byte count overflows 64 bits.
  expect_error(one_tensor_file({uint64_t(1) << 62, 1}, 28), "outside the file");

  Builder dup;
  dup.header(3, 2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad(32).zeros(64);
  expect_error(dup.bytes(), "duplicate tensor 't'");
}

TEST(Gguf, RejectsAbsurdCounts) {
  const uint64_t huge = uint64_t(1) << 60;
  Builder kv_count;
  kv_count.header(3, 0, huge).kv_u32("k", 1).zeros(5);
  expect_error(kv_count.bytes(), "truncated metadata key #1 at offset 41");
  Builder tensor_count;
  tensor_count.header(3, huge, 0).tensor("t", {32}, 0, 0).zeros(4);
  expect_error(tensor_count.bytes(), "truncated tensor info #1");
  Builder key_len;
  key_len.header(3, 0, 1).u64(huge).zeros(64);
  expect_error(key_len.bytes(), "truncated metadata key #0");
  Builder str_len;
  str_len.header(3, 0, 1).str("k").u32(8).u64(huge).zeros(64);
  expect_error(str_len.bytes(), "truncated metadata value for key 'k'");
  Builder arr_count;
  arr_count.header(3, 0, 1).str("k").u32(9).u32(0).u64(huge).zeros(64);
  expect_error(arr_count.bytes(), "declares 1152921504606846976 array elements");
  Builder arr_str_count;  // strings take at least 8 bytes each
  arr_str_count.header(3, 0, 1).str("k").u32(9).u32(8).u64(9).zeros(64);
  expect_error(arr_str_count.bytes(), "declares 9 array elements");
  Builder too_many;  // bytes enough, but over the file-wide element cap
  too_many.header(3, 0, 1).str("k").u32(9).u32(0).u64((uint64_t(1) << 24) + 1);
  too_many.zeros((size_t(1) << 24) + 1);
  expect_error(too_many.bytes(), "metadata arrays hold more than 16777216 elements");
  Builder name_len;
  name_len.header(3, 1, 0).u64(huge).zeros(64);
  expect_error(name_len.bytes(), "truncated tensor info #0");
}

TEST(Gguf, RejectsBadMetadata) {
  Builder type;
  type.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(type.bytes(), "unknown value type 13");
  Builder elem_type;
  elem_type.header(3, 0, 1).str("k").u32(9).u32(77).u64(1).u32(0);
  expect_error(elem_type.bytes(), "array of unknown value type 77");
  Builder dup;
  dup.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2);
  expect_error(dup.bytes(), "duplicate metadata key 'k'");

  Builder deep;  // arrays of one array of one array ... of nothing
  deep.header(3, 0, 1).str("k").u32(9);
  for (int i = 0; i < 40; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  expect_error(deep.bytes(), "nests arrays deeper than");
  Builder shallow;
  shallow.header(3, 0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(0);
  EXPECT_TRUE(parse(shallow.bytes()).ok());

  for (uint32_t a : {0u, 12u, 3u}) {
    Builder align;
    align.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_error(align.bytes(), "general.alignment must be");
  }
  Builder align_str;
  align_str.header(3, 0, 1).kv_str("general.alignment", "32");
  expect_error(align_str.bytes(), "general.alignment must be");
}

TEST(Gguf, CustomAlignmentPlacesData) {
  Builder b;
  b.header(3, 1, 1).kv_u64("general.alignment", 256).tensor("t", {4}, 0, 0).pad(256).f32(1.5f);
  b.zeros(12);
  auto r = parse(b.bytes());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->alignment(), 256u);
  auto t = (*r)->tensor("t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(static_cast<const char*>(t->data) - b.bytes().data(), 256);
  EXPECT_EQ(t->as<float>()[0], 1.5f);
}

TEST(GgufConfig, TinyLlama) {
  auto g = GgufFile::open(fixture("tiny_llama_meta.gguf"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->intermediate_size, 160);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);  // the f32 in the file, read back as the decimal written
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_dim, 16);
  EXPECT_EQ(c->head_dim, 0);     // no key_length: finalize() derives it
  EXPECT_EQ(c->vocab_size, 40);  // from tokenizer.ggml.tokens
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_TRUE(c->rope_interleaved);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c->bos_token_id, 1);
}

TEST(GgufConfig, TinyQwen3) {
  auto g = GgufFile::open(fixture("tiny_qwen3_meta.gguf"));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c->num_attention_heads, 2);
  EXPECT_EQ(c->num_key_value_heads, 2);  // head_count_kv absent
  EXPECT_EQ(c->head_dim, 48);
  EXPECT_EQ(c->rope_dim, 0);
  EXPECT_EQ(c->vocab_size, 48);  // uint64 key
  EXPECT_EQ(c->max_position_embeddings, 32768);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c->rope_scaling.beta_slow, 1.0);  // default
  EXPECT_EQ(c->rope_scaling.attention_factor, 1.25);
  EXPECT_FALSE(c->rope_interleaved);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->tie_word_embeddings);  // has output.weight
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7}));
  EXPECT_FALSE(c->bos_token_id.has_value());
}

// A qwen2 file built here, with uint64 counts and defaults for the optional keys; `extra` appends
// `n_extra` more key/value pairs.
std::string qwen2_file(const std::string& arch = "qwen2", bool with_eps = true, int n_extra = 0,
                       const std::function<void(Builder&)>& extra = nullptr) {
  Builder b;
  b.header(3, 1, (with_eps ? 7 : 6) + n_extra)
      .kv_str("general.architecture", arch)
      .kv_u64(arch + ".embedding_length", 32)
      .kv_u64(arch + ".block_count", 1)
      .kv_u32(arch + ".feed_forward_length", 64)
      .kv_u32(arch + ".attention.head_count", 4)
      .kv_u32(arch + ".vocab_size", 100);
  if (with_eps) b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (extra) extra(b);
  return b.tensor("output.weight", {32, 100}, 0, 0).pad(32).zeros(32 * 100 * 4).bytes();
}

void expect_config_error(const std::string& bytes, const std::string& fragment) {
  auto g = parse(bytes);
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_FALSE(c.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(c.error().message.find(fragment), std::string::npos) << c.error().message;
}

TEST(GgufConfig, Qwen2DefaultsAndBias) {
  auto g = parse(qwen2_file());
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_FALSE(c->rope_interleaved);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->hidden_size, 32);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->vocab_size, 100);
  EXPECT_EQ(c->rope_theta, 10000.0);            // default
  EXPECT_EQ(c->max_position_embeddings, 2048);  // ModelConfig default when absent
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

// What llama.cpp fixes for the family rather than reads: every sixth layer global, the sliding
// layers' RoPE base, query scaling by head_dim, norms stored with their 1 added.
TEST(GgufConfig, Gemma3) {
  auto g = parse(qwen2_file("gemma3", true, 2, [](Builder& b) {
    b.kv_u32("gemma3.attention.sliding_window", 512).kv_u32("gemma3.attention.key_length", 16);
  }));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(c->model_type, "gemma3_text");
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->rope_interleaved);
  EXPECT_TRUE(c->scale_embeddings);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_TRUE(c->norm_offset);
  EXPECT_TRUE(c->norm_weights_include_offset);
  EXPECT_EQ(c->query_pre_attn_scalar, 16.0);
  EXPECT_EQ(c->rope_local_theta, 10000.0);
  EXPECT_EQ(c->layer_sliding_window, std::vector<int32_t>{512});  // one layer: a sliding one
}

// Files that name only the EOS still stop at their chat format's end-of-turn marker.
TEST(GgufConfig, EndOfTurnTokensEndGeneration) {
  auto g = parse(qwen2_file("qwen2", true, 2, [](Builder& b) {
    b.kv_u32("tokenizer.ggml.eos_token_id", 1)
        .kv_str_array("tokenizer.ggml.tokens",
                      {"<pad>", "<eos>", "<end_of_turn>", "end_of_turn", "<|im_end|>", "x"});
  }));
  ASSERT_TRUE(g.ok()) << g.error().message;
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 2, 4}));
}

TEST(GgufConfig, Errors) {
  expect_config_error(qwen2_file("gemma7"),
                      "'gemma7' is not supported (supported: llama, qwen2, qwen3, gemma3)");
  expect_config_error(qwen2_file("qwen2", false), "qwen2.attention.layer_norm_rms_epsilon");
  expect_config_error(
      qwen2_file("qwen2", true, 1, [](Builder& b) { b.kv_str("qwen2.rope.scaling.type", "ntk"); }),
      "'qwen2.rope.scaling.type' = 'ntk'");
  expect_config_error(
      qwen2_file("qwen2", true, 1, [](Builder& b) { b.kv_str("qwen2.rope.scaling.type", "yarn"); }),
      "qwen2.rope.scaling.factor");
  expect_config_error(qwen2_file("qwen2", true, 2,
                                 [](Builder& b) {
                                   b.kv_u32("qwen2.attention.key_length", 8);
                                   b.kv_u32("qwen2.attention.value_length", 16);
                                 }),
                      "key_length 8 != value_length 16");
  expect_config_error(qwen2_file("qwen2", true, 1,
                                 [](Builder& b) { b.kv_u32("qwen2.attention.head_count_kv", 0); }),
                      "'qwen2.attention.head_count_kv' must be positive");
  expect_config_error(
      qwen2_file("qwen2", true, 1, [](Builder& b) { b.kv_f32("qwen2.rope.freq_base", -1.0f); }),
      "qwen2.rope.freq_base");

  Builder missing;
  missing.header(3, 0, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
  expect_config_error(missing.bytes(), "llama.embedding_length");
  Builder no_arch;
  no_arch.header(3, 0, 0);
  expect_config_error(no_arch.bytes(), "general.architecture");
  Builder no_vocab;
  no_vocab.header(3, 0, 6)
      .kv_str("general.architecture", "llama")
      .kv_u32("llama.embedding_length", 32)
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.feed_forward_length", 64)
      .kv_u32("llama.attention.head_count", 4)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  expect_config_error(no_vocab.bytes(), "vocabulary size unknown");
}

TEST(GgufConfig, DefaultModel) {
  const std::string path = test::default_model_path();
  KESTREL_SKIP_IF_ABSENT(path, "the default model");
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ((*g)->tensors().size(), 272u);
  auto c = config_from_gguf(**g);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->num_hidden_layers, 30);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->num_attention_heads, 9);
  EXPECT_EQ(c->num_key_value_heads, 3);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_theta, 100000.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->rope_interleaved);
  // <|im_end|>, then <|endoftext|> (an end-of-turn marker to llama.cpp too).
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(c->bos_token_id, 1);
  auto embd = (*g)->tensor("token_embd.weight");
  ASSERT_TRUE(embd.ok());
  EXPECT_EQ(embd->shape, (Shape{49152, 576}));
  EXPECT_EQ((*g)->get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
}

}  // namespace
}  // namespace kestrel
