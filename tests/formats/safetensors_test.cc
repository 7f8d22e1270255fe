#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

namespace kestrel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A whole file: length prefix, header text as given, data section.
std::string serialize(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

struct Spec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Header JSON with contiguous offsets in the given order, plus the data section. Like the
// reference writer, pads the header with spaces so the data section starts 8-byte aligned.
std::string build_file(const std::vector<Spec>& specs,
                       const std::map<std::string, std::string>& metadata = {}) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& s : specs) {
    header[s.name] = {{"dtype", s.dtype},
                      {"shape", s.shape},
                      {"data_offsets", {data.size(), data.size() + s.bytes.size()}}};
    data += s.bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 8 + 7) / 8 * 8 - 8, ' ');
  return serialize(text, data);
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xff);
  s[0] = char(0x5a);  // never all zeros
  return s;
}

// The result views `bytes`; callers keep the string alive while they read tensors.
Expected<std::unique_ptr<SafetensorsFile>> parse_string(const std::string& bytes) {
  return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Expects `r` to fail with a message containing every substring in `parts`.
template <typename T>
void expect_error(const Expected<T>& r, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << *parts.begin() << "'";
  for (const auto& p : parts)
    EXPECT_NE(r.error().message.find(p), std::string::npos)
        << "message '" << r.error().message << "' lacks '" << p << "'";
}

// Written by Python `safetensors.numpy.save` 0.8.0 (an independent writer):
//   save({"w": float32 [[1.5, -2], [0.25, 3]], "h": float16 [1, -0.5], "b": int8 [1, -2, 3]},
//        metadata={"format": "np"})
// The header is padded with spaces to a multiple of 8 bytes.
std::string python_written_file() {
  const std::string header =
      R"({"__metadata__":{"format":"np"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},)"
      R"("b":{"dtype":"I8","shape":[3],"data_offsets":[20,23]}}   )";
  const unsigned char data[] = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0,
                                0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x40, 0x40,
                                0x00, 0x3c, 0x00, 0xb8, 0x01, 0xfe, 0x03};
  return serialize(header, std::string(reinterpret_cast<const char*>(data), sizeof(data)));
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("kestrel_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsFileWrittenByPythonSafetensors) {
  const std::string path = write("py.safetensors", python_written_file());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ((*f)->entries().size(), 3u);
  EXPECT_EQ((*f)->metadata().at("format"), "np");

  auto w = (*f)->tensor("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (Shape{2, 2}));
  EXPECT_EQ(w->as<float>()[0], 1.5f);
  EXPECT_EQ(w->as<float>()[1], -2.0f);
  EXPECT_EQ(w->as<float>()[2], 0.25f);
  EXPECT_EQ(w->as<float>()[3], 3.0f);

  auto h = (*f)->tensor("h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->dtype, DType::F16);
  EXPECT_EQ(h->as<uint16_t>()[0], 0x3c00);  // 1.0
  EXPECT_EQ(h->as<uint16_t>()[1], 0xb800);  // -0.5

  auto b = (*f)->tensor("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype, DType::I8);
  EXPECT_EQ(b->shape, (Shape{3}));
  EXPECT_EQ(b->as<int8_t>()[0], 1);
  EXPECT_EQ(b->as<int8_t>()[1], -2);
  EXPECT_EQ(b->as<int8_t>()[2], 3);
}

TEST_F(SafetensorsTest, ReadsEveryDtypeAsRawView) {
  struct Case {
    const char* dtype;
    DType expected;
    size_t elem;
  };
  const Case cases[] = {
      {"F32", DType::F32, 4}, {"F16", DType::F16, 2},         {"BF16", DType::BF16, 2},
      {"F64", DType::F64, 8}, {"F8_E4M3", DType::F8_E4M3, 1}, {"I8", DType::I8, 1},
      {"U8", DType::U8, 1},   {"I16", DType::I16, 2},         {"I32", DType::I32, 4},
      {"I64", DType::I64, 8}, {"BOOL", DType::BOOL, 1}};
  std::vector<Spec> specs;
  uint32_t seed = 1;
  for (const auto& c : cases)
    specs.push_back(
        {std::string("t_") + c.dtype, c.dtype, {3, 2}, random_bytes(6 * c.elem, seed++)});
  const std::string bytes = build_file(specs);
  const std::string path = write("all.safetensors", bytes);

  auto from_file = SafetensorsFile::open(path);
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  auto from_memory = parse_string(bytes);
  ASSERT_TRUE(from_memory.ok()) << from_memory.error().message;

  for (const auto* f : {from_file->get(), from_memory->get()}) {
    EXPECT_EQ(f->entries().size(), std::size(cases));
    EXPECT_TRUE(f->metadata().empty());
    for (size_t i = 0; i < std::size(cases); ++i) {
      SCOPED_TRACE(cases[i].dtype);
      ASSERT_TRUE(f->contains(specs[i].name));
      auto t = f->tensor(specs[i].name);
      ASSERT_TRUE(t.ok()) << t.error().message;
      EXPECT_EQ(t->dtype, cases[i].expected);
      EXPECT_EQ(t->shape, (Shape{3, 2}));
      ASSERT_EQ(t->nbytes(), specs[i].bytes.size());
      EXPECT_EQ(std::memcmp(t->data, specs[i].bytes.data(), t->nbytes()), 0);
    }
  }
  expect_error(from_file->get()->tensor("nope"), {"'nope'", "not found", path});
}

TEST_F(SafetensorsTest, ReadsMetadataAndScalarAndEmptyTensors) {
  const std::string bytes =
      build_file({{"scalar", "F32", {}, bytes_of(std::vector<float>{7.25f})},
                  {"empty", "BF16", {0, 4}, ""},
                  {"after", "I32", {2}, bytes_of(std::vector<int32_t>{-3, 9})}},
                 {{"format", "pt"}, {"note", "kestrel"}});
  auto f = parse_string(bytes);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->metadata().size(), 2u);
  EXPECT_EQ((*f)->metadata().at("note"), "kestrel");
  auto s = (*f)->tensor("scalar");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape.ndim, 0);
  EXPECT_EQ(s->as<float>()[0], 7.25f);
  auto e = (*f)->tensor("empty");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->numel(), 0);
  auto a = (*f)->tensor("after");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->as<int32_t>()[1], 9);
}

TEST_F(SafetensorsTest, AcceptsPaddedHeaderAndGapsBetweenTensors) {
  // Offsets need not be contiguous; only overlaps are corrupt.
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("b":{"dtype":"U8","shape":[2],"data_offsets":[10,12]}}      )";
  const std::string data = random_bytes(12, 3);
  const std::string bytes = serialize(header, data);  // parse() views it in place
  auto f = parse_string(bytes);
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto b = (*f)->tensor("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::memcmp(b->data, data.data() + 10, 2), 0);
}

TEST_F(SafetensorsTest, AcceptsUnpaddedHeader) {
  // Nothing in the format requires alignment; such views are byte-exact but may be unaligned.
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_NE((8 + header.size()) % 4, 0u);
  const std::string data = random_bytes(8, 5);
  const std::string bytes = serialize(header, data);
  auto f = parse_string(bytes);
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto t = (*f)->tensor("t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(std::memcmp(t->data, data.data(), 8), 0);
}

TEST_F(SafetensorsTest, TooManyDimsIsAnErrorOnlyForThatTensor) {
  const std::string bytes =
      build_file({{"ok", "U8", {2}, "ab"}, {"deep", "U8", {1, 1, 1, 1, 1}, "c"}});
  auto f = parse_string(bytes);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE((*f)->tensor("ok").ok());
  expect_error((*f)->tensor("deep"), {"'deep'", "5 dims"});
}

TEST_F(SafetensorsTest, EveryTruncationFails) {
  const std::string full = python_written_file();
  const uint64_t header_end = 8 + 200;
  ASSERT_TRUE(parse_string(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    const std::string prefix = full.substr(0, len);
    auto r = parse_string(prefix);
    if (len < 8) {
      expect_error(r, {"too small"});
    } else if (len < header_end) {
      expect_error(r, {"header length 200 exceeds the file size"});
    } else {
      expect_error(r, {"out of range"});
    }
    // The same through a real file, whose errors name the path.
    const std::string path = write("trunc.safetensors", prefix);
    expect_error(SafetensorsFile::open(path), {path});
  }
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFileOrLimit) {
  expect_error(parse_string(le64(1000) + "{}"), {"header length 1000 exceeds the file size 10"});
  expect_error(parse_string(le64(~0ull) + "{}"), {"exceeds the file size"});
  // A sparse file just over 100 MB lets the header-size limit trigger without writing 100 MB.
  const std::string path = write("huge.safetensors", le64(100ull * 1024 * 1024 + 1));
  fs::resize_file(path, 100ull * 1024 * 1024 + 64);
  expect_error(SafetensorsFile::open(path), {path, "exceeds the 104857600 byte limit"});
}

TEST_F(SafetensorsTest, RejectsMalformedJson) {
  expect_error(parse_string(serialize("{\"a\": {", "")), {"invalid JSON"});
  expect_error(parse_string(serialize("", "")), {"invalid JSON"});
  expect_error(parse_string(serialize("[1, 2]", "")), {"not an object"});
  // nlohmann reports number overflow as out_of_range rather than parse_error.
  expect_error(parse_string(serialize(R"({"t": {"shape": [1e999]}})", "")), {"invalid JSON"});
  expect_error(parse_string(serialize("\"str\"", "")), {"not an object"});
  expect_error(parse_string(serialize(R"({"a": 5})", "")), {"'a'", "not an object"});
  expect_error(parse_string(serialize(R"({"__metadata__": [1]})", "")), {"__metadata__"});
  expect_error(parse_string(serialize(R"({"__metadata__": {"k": 1}})", "")),
               {"__metadata__", "'k'", "not a string"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtypeNamingTensorAndDtype) {
  expect_error(
      parse_string(serialize(
          R"({"weird.weight": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}})", "x")),
      {"'weird.weight'", "unknown dtype 'F4'"});
  expect_error(
      parse_string(serialize(R"({"t": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", "x")),
      {"'t'", "dtype"});
  expect_error(parse_string(serialize(R"({"t": {"shape": [1], "data_offsets": [0, 1]}})", "x")),
               {"'t'", "dtype"});
}

TEST_F(SafetensorsTest, RejectsBadShapes) {
  auto with_shape = [](const std::string& shape) {
    return parse_string(serialize(
        R"({"t": {"dtype": "U8", "shape": )" + shape + R"(, "data_offsets": [0, 2]}})", "ab"));
  };
  expect_error(with_shape("[-1, -2]"), {"'t'", "shape"});
  expect_error(with_shape("[1.5]"), {"'t'", "shape"});
  expect_error(with_shape("[\"2\"]"), {"'t'", "shape"});
  expect_error(with_shape("[[2]]"), {"'t'", "shape"});
  expect_error(with_shape("2"), {"'t'", "shape"});
  expect_error(with_shape("[4611686018427387904, 4611686018427387904]"), {"'t'", "too large"});
  expect_error(with_shape("[9223372036854775807, 4]"), {"'t'", "too large"});
  expect_error(with_shape("[18446744073709551615]"), {"'t'", "shape"});
}

TEST_F(SafetensorsTest, RejectsBadOffsets) {
  auto with_offsets = [](const std::string& dtype, const std::string& shape,
                         const std::string& offsets, size_t data_size) {
    return parse_string(serialize(R"({"t": {"dtype": ")" + dtype + R"(", "shape": )" + shape +
                                      R"(, "data_offsets": )" + offsets + "}}",
                                  std::string(data_size, 'z')));
  };
  expect_error(with_offsets("F32", "[2]", "[0, 8]", 7), {"'t'", "out of range", "7 bytes"});
  expect_error(with_offsets("F32", "[2]", "[8, 16]", 12), {"'t'", "out of range"});
  expect_error(with_offsets("F32", "[2]", "[8, 4]", 12), {"'t'", "begin 8 > end 4"});
  expect_error(with_offsets("F32", "[2]", "[-8, 0]", 12), {"'t'", "non-negative"});
  expect_error(with_offsets("F32", "[2]", "[0, 8, 9]", 12), {"'t'", "data_offsets"});
  expect_error(with_offsets("F32", "[2]", "\"0-8\"", 12), {"'t'", "data_offsets"});
  expect_error(with_offsets("F32", "[2, 2]", "[0, 12]", 16),
               {"'t'", "size mismatch", "2x2", "needs 16 bytes", "give 12"});
  expect_error(with_offsets("BF16", "[3]", "[0, 4]", 16), {"'t'", "size mismatch"});
  expect_error(with_offsets("F8_E4M3", "[3]", "[0, 4]", 16), {"'t'", "size mismatch"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  const std::string header =
      R"({"first": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
      R"( "second": {"dtype": "F32", "shape": [4], "data_offsets": [12, 28]}})";
  expect_error(parse_string(serialize(header, random_bytes(28, 4))),
               {"'first'", "'second'", "overlap"});
  const std::string same = R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                           R"( "y": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})";
  expect_error(parse_string(serialize(same, "abcd")), {"overlap"});
  // An empty tensor inside another's range occupies no bytes.
  const std::string empty_inside =
      R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
      R"( "e": {"dtype": "U8", "shape": [0], "data_offsets": [2, 2]}})";
  EXPECT_TRUE(parse_string(serialize(empty_inside, "abcd")).ok());
}

TEST_F(SafetensorsTest, OpensShardedCheckpointViaIndex) {
  const std::string a = random_bytes(24, 10), b = random_bytes(8, 11), c = random_bytes(6, 12);
  write("model-00001-of-00002.safetensors", build_file({{"model.embed.weight", "F32", {2, 3}, a},
                                                        {"model.norm.weight", "BF16", {4}, b}}));
  write("model-00002-of-00002.safetensors", build_file({{"lm_head.weight", "F16", {3}, c}}));
  // Bogus extra file: must be ignored when an index exists.
  write("stray.safetensors", "garbage");
  json index = {{"metadata", {{"total_size", 38}}},
                {"weight_map",
                 {{"model.embed.weight", "model-00001-of-00002.safetensors"},
                  {"model.norm.weight", "model-00001-of-00002.safetensors"},
                  {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
  write("model.safetensors.index.json", index.dump(2));

  auto ck = SafetensorsCheckpoint::open_dir(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ((*ck)->names(), (std::vector<std::string>{"lm_head.weight", "model.embed.weight",
                                                      "model.norm.weight"}));
  auto head = (*ck)->tensor("lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->dtype, DType::F16);
  EXPECT_EQ(std::memcmp(head->data, c.data(), c.size()), 0);
  auto norm = (*ck)->tensor("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype, DType::BF16);
  EXPECT_EQ(std::memcmp(norm->data, b.data(), b.size()), 0);
  auto embed = (*ck)->tensor("model.embed.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(std::memcmp(embed->data, a.data(), a.size()), 0);

  EXPECT_TRUE((*ck)->contains("model.norm.weight"));
  EXPECT_FALSE((*ck)->contains("model.layers.0.weight"));
  expect_error((*ck)->tensor("model.layers.0.weight"),
               {"tensor 'model.layers.0.weight' not found in checkpoint " + dir_.string()});
}

TEST_F(SafetensorsTest, IndexErrors) {
  write("s1.safetensors", build_file({{"a", "U8", {2}, "xy"}}));
  const std::string index_path = (dir_ / "model.safetensors.index.json").string();
  auto open_with_index = [&](const std::string& text) {
    write("model.safetensors.index.json", text);
    return SafetensorsCheckpoint::open_dir(dir_.string());
  };
  expect_error(open_with_index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})"),
               {index_path, "shard 's2.safetensors'", "does not exist"});
  expect_error(open_with_index(R"({"weight_map": {"a": "s1.safetensors", "z": "s1.safetensors"}})"),
               {"'z'", "s1.safetensors", "absent"});
  expect_error(open_with_index("{\"weight_map\": "), {index_path, "invalid JSON"});
  expect_error(open_with_index(R"({"metadata": {}})"), {index_path, "weight_map"});
  expect_error(open_with_index(R"({"weight_map": {}})"), {index_path, "weight_map"});
  expect_error(open_with_index(R"({"weight_map": {"a": 1}})"), {"'a'", "not a string"});
  write("bad.safetensors", "12345678");
  const std::string bad_path = (dir_ / "bad.safetensors").string();
  expect_error(open_with_index(R"({"weight_map": {"a": "bad.safetensors"}})"),
               {bad_path, "exceeds the file size"});
}

TEST_F(SafetensorsTest, PrefersSingleModelFile) {
  write("model.safetensors", build_file({{"w", "I8", {2}, "\x05\xfb"}}));
  write("other.safetensors", "not a safetensors file");
  auto ck = SafetensorsCheckpoint::open_dir(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ((*ck)->names(), std::vector<std::string>{"w"});
  auto w = (*ck)->tensor("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->as<int8_t>()[1], -5);
}

TEST_F(SafetensorsTest, FallsBackToAllSafetensorsFiles) {
  write("b.safetensors", build_file({{"from_b", "F32", {1}, bytes_of(std::vector<float>{2.5f})}}));
  write("a.safetensors", build_file({{"from_a", "F32", {1}, bytes_of(std::vector<float>{-1.0f})}}));
  write("notes.txt", "ignored");
  auto ck = SafetensorsCheckpoint::open_dir(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.error().message;
  EXPECT_EQ((*ck)->names(), (std::vector<std::string>{"from_a", "from_b"}));
  EXPECT_EQ((*ck)->tensor("from_b")->as<float>()[0], 2.5f);
  EXPECT_EQ((*ck)->tensor("from_a")->as<float>()[0], -1.0f);

  write("c.safetensors", build_file({{"from_a", "F32", {1}, bytes_of(std::vector<float>{0.5f})}}));
  expect_error(SafetensorsCheckpoint::open_dir(dir_.string()),
               {"'from_a'", "a.safetensors", "c.safetensors"});
}

TEST_F(SafetensorsTest, DirectoryErrors) {
  expect_error(SafetensorsCheckpoint::open_dir(dir_.string()), {"no .safetensors files"});
  expect_error(SafetensorsCheckpoint::open_dir((dir_ / "absent").string()), {"not a directory"});
  write("x.safetensors", "short");
  expect_error(SafetensorsCheckpoint::open_dir(dir_.string()), {"x.safetensors", "too small"});
}

}  // namespace
}  // namespace kestrel
