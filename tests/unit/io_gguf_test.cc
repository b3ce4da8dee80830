// GGUF reader and writer: round trips of every value and tensor type, hand-written v2/v1
// files, a table of malformed files (each error must name its problem), the bundled model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace kvpack {
namespace {

// Little-endian byte builder for files the writer cannot (or must not) produce.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& Raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& U8(uint8_t v) { return Put(v); }
  Bytes& U32(uint32_t v) { return Put(v); }
  Bytes& U64(uint64_t v) { return Put(v); }
  Bytes& I64(int64_t v) { return Put(v); }
  Bytes& Str(std::string_view s) { return U64(s.size()).Raw(s); }
  Bytes& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return Raw("GGUF").U32(version).U64(n_tensors).U64(n_kv);
  }
  Bytes& KvU32(std::string_view key, uint32_t v) { return Str(key).U32(4).U32(v); }
  Bytes& KvStr(std::string_view key, std::string_view v) { return Str(key).U32(8).Str(v); }
  Bytes& Tensor(std::string_view name, const std::vector<int64_t>& ne, uint32_t type,
                uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) I64(d);
    return U32(type).U64(offset);
  }
  Bytes& PadTo(size_t a) {
    while (b.size() % a != 0) b.push_back(0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  std::vector<uint8_t> b;
};

Result<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBuffer(bytes.data(), bytes.size(), "test.gguf");
}

GgufValue Int(GgufValueType t, int64_t v) { return GgufValue{t, v}; }
GgufValue Uint(GgufValueType t, uint64_t v) { return GgufValue{t, v}; }
GgufValue Arr(GgufValueType et, std::vector<GgufValue> values) {
  auto a = std::make_shared<GgufArray>();
  a->element_type = et;
  a->values = std::move(values);
  return GgufValue{GgufValueType::kArray, a};
}

// Structural equality of two values (types, payloads, nested arrays).
bool SameValue(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (a.type != GgufValueType::kArray) {
    if (const auto* d = std::get_if<double>(&a.data)) {
      const double e = std::get<double>(b.data);
      return (std::isnan(*d) && std::isnan(e)) || *d == e;
    }
    return a.data == b.data;
  }
  const GgufArray& x = *std::get<std::shared_ptr<GgufArray>>(a.data);
  const GgufArray& y = *std::get<std::shared_ptr<GgufArray>>(b.data);
  if (x.element_type != y.element_type || x.values.size() != y.values.size()) return false;
  for (size_t i = 0; i < x.values.size(); ++i) {
    if (!SameValue(x.values[i], y.values[i])) return false;
  }
  return true;
}

std::vector<GgufKeyValue> AllValueTypes() {
  using T = GgufValueType;
  std::vector<GgufKeyValue> kvs = {
      {"t.u8", Uint(T::kUint8, 255)},
      {"t.i8", Int(T::kInt8, -128)},
      {"t.u16", Uint(T::kUint16, 65535)},
      {"t.i16", Int(T::kInt16, -32768)},
      {"t.u32", Uint(T::kUint32, 4294967295u)},
      {"t.i32", Int(T::kInt32, -2147483647 - 1)},
      {"t.f32", GgufValue{T::kFloat32, double{-1.5f}}},
      {"t.bool_true", GgufValue{T::kBool, true}},
      {"t.bool_false", GgufValue{T::kBool, false}},
      {"t.string", GgufValue{T::kString, std::string("h\xc3\xa9llo\n\0x", 9)}},
      {"t.empty_string", GgufValue{T::kString, std::string()}},
      {"t.u64", Uint(T::kUint64, std::numeric_limits<uint64_t>::max())},
      {"t.i64", Int(T::kInt64, std::numeric_limits<int64_t>::min())},
      {"t.f64", GgufValue{T::kFloat64, 3.141592653589793}},
      {"t.arr_u8", Arr(T::kUint8, {Uint(T::kUint8, 1), Uint(T::kUint8, 2)})},
      {"t.arr_i16", Arr(T::kInt16, {Int(T::kInt16, -3), Int(T::kInt16, 4)})},
      {"t.arr_f64", Arr(T::kFloat64, {GgufValue{T::kFloat64, 0.25}})},
      {"t.arr_bool", Arr(T::kBool, {GgufValue{T::kBool, true}, GgufValue{T::kBool, false}})},
      {"t.arr_empty", Arr(T::kInt32, {})},
      {"t.arr_nested",
       Arr(T::kArray, {Arr(T::kInt32, {Int(T::kInt32, 1), Int(T::kInt32, -2)}),
                       Arr(T::kString, {GgufValue{T::kString, std::string("a")}}),
                       Arr(T::kArray, {Arr(T::kUint64, {Uint(T::kUint64, 7)})})})},
  };
  return kvs;
}

TEST(GgufRoundTrip, EveryValueType) {
  GgufWriter w;
  const std::vector<GgufKeyValue> kvs = AllValueTypes();
  for (const GgufKeyValue& kv : kvs) w.Set(kv.key, kv.value);
  w.SetString("s", "str");
  w.SetUint32("u32", 7);
  w.SetInt32("i32", -7);
  w.SetFloat32("f32", 0.5f);
  w.SetBool("b", true);
  w.SetStringArray("sa", {"x", "", "zz"});
  w.SetFloat32Array("fa", {1.0f, -2.5f});
  w.SetInt32Array("ia", {3, -4});
  const std::vector<uint8_t> bytes = w.Serialize();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->alignment(), 32u);
  EXPECT_EQ((*f)->metadata().size(), kvs.size() + 8);
  for (const GgufKeyValue& kv : kvs) {
    const GgufValue* v = (*f)->Find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_TRUE(SameValue(*v, kv.value)) << kv.key;
  }
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetString("s").value(), "str");
  EXPECT_EQ(g.GetInt("u32").value(), 7);
  EXPECT_EQ(g.GetInt("i32").value(), -7);
  EXPECT_EQ(g.GetFloat("f32").value(), 0.5);
  EXPECT_EQ(g.GetFloat("u32").value(), 7.0);  // integers read as floats
  EXPECT_TRUE(g.GetBool("b").value());
  EXPECT_EQ(g.GetStringArray("sa").value(), (std::vector<std::string>{"x", "", "zz"}));
  EXPECT_EQ(g.GetFloatArray("fa").value(), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(g.GetIntArray("ia").value(), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(g.GetIntArray("t.arr_empty").value().size(), 0u);
  EXPECT_EQ(g.GetInt("t.i64").value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(g.GetInt("t.u8").value(), 255);
  EXPECT_FALSE(g.GetBool("t.bool_false").value());
}

TEST(GgufAccessors, ErrorsNameTheKeyAndProblem) {
  GgufWriter w;
  w.Set("big", Uint(GgufValueType::kUint64, std::numeric_limits<uint64_t>::max()));
  w.SetString("s", "x");
  w.SetInt32Array("ia", {1});
  w.SetBool("b", false);
  auto f = Parse(w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetInt("missing").status().code(), StatusCode::kNotFound);
  EXPECT_NE(g.GetInt("missing").status().message().find("missing"), std::string::npos);
  auto big = g.GetInt("big");
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("big"), std::string::npos);
  auto s_as_int = g.GetInt("s");
  EXPECT_EQ(s_as_int.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s_as_int.status().message().find("string"), std::string::npos);
  EXPECT_FALSE(g.GetFloat("s").ok());
  EXPECT_FALSE(g.GetString("ia").ok());
  EXPECT_FALSE(g.GetStringArray("ia").ok());
  EXPECT_FALSE(g.GetBool("s").ok());
  EXPECT_FALSE(g.GetIntArray("s").ok());
  EXPECT_FALSE(g.GetFloatArray("b").ok());
  EXPECT_EQ(g.GetFloatArray("ia").value(), std::vector<float>{1.0f});
  EXPECT_EQ(g.Find("nope"), nullptr);
  EXPECT_EQ(g.FindTensor("nope"), nullptr);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

class GgufTensorRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufTensorRoundTrip, EveryTypeKeepsShapesBytesAndAlignment) {
  const uint32_t alignment = GetParam();
  const GgmlType kTypes[] = {
      GgmlType::kF32,  GgmlType::kF16,  GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
      GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ8_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
      GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kI8,
      GgmlType::kI16,  GgmlType::kI32,  GgmlType::kI64,  GgmlType::kF64,  GgmlType::kBF16};
  GgufWriter w(alignment);
  w.SetString("general.architecture", "test");
  struct Expected {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<Expected> expected;
  uint32_t seed = 1;
  for (GgmlType t : kTypes) {
    const GgmlTypeTraits tr = GetGgmlTypeTraits(t);
    ASSERT_NE(tr.name, nullptr);
    // Shapes of 1 to 3 dims with a block-multiple ne[0] and an odd row count.
    std::vector<int64_t> ne = {tr.block_size * 2, 3};
    if (seed % 3 == 0) ne.push_back(2);
    if (seed % 4 == 0) ne = {tr.block_size};
    size_t n = GgmlRowBytes(t, ne[0]);
    for (size_t d = 1; d < ne.size(); ++d) n *= static_cast<size_t>(ne[d]);
    Expected e{std::string("tensor.") + tr.name, ne, t, RandomBytes(n, seed++)};
    ASSERT_TRUE(w.AddTensor(e.name, e.ne, e.type, e.bytes).ok()) << e.name;
    expected.push_back(std::move(e));
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = **f;
  EXPECT_EQ(g.alignment(), alignment);
  EXPECT_EQ(g.data_offset() % alignment, 0u);
  if (alignment == 32) {
    EXPECT_EQ(g.Find("general.alignment"), nullptr);  // default alignment is not written
  } else {
    EXPECT_EQ(g.GetInt("general.alignment").value(), alignment);
  }
  ASSERT_EQ(g.tensors().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const GgufTensorInfo* t = g.FindTensor(expected[i].name);
    ASSERT_NE(t, nullptr) << expected[i].name;
    EXPECT_EQ(t, &g.tensors()[i]);
    EXPECT_EQ(t->ne, expected[i].ne);
    EXPECT_EQ(t->type, expected[i].type);
    EXPECT_EQ(t->offset % alignment, 0u);
    ASSERT_EQ(t->n_bytes, expected[i].bytes.size());
    EXPECT_EQ(static_cast<size_t>(t->data - bytes.data()), g.data_offset() + t->offset);
    EXPECT_EQ(std::memcmp(t->data, expected[i].bytes.data(), t->n_bytes), 0) << t->name;
    int64_t n_el = 1;
    for (int64_t d : expected[i].ne) n_el *= d;
    EXPECT_EQ(t->n_elements(), n_el);
  }
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufTensorRoundTrip, ::testing::Values(32u, 64u));

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("a", {33}, GgmlType::kQ8_0, std::vector<uint8_t>(34)).ok());
  EXPECT_FALSE(w.AddTensor("a", {32}, GgmlType::kQ8_0, std::vector<uint8_t>(33)).ok());
  EXPECT_FALSE(w.AddTensor("a", {}, GgmlType::kF32, {}).ok());
  EXPECT_FALSE(w.AddTensor("a", {1, 1, 1, 1, 1}, GgmlType::kF32, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("a", {0}, GgmlType::kF32, {}).ok());
  EXPECT_FALSE(w.AddTensor("a", {1}, static_cast<GgmlType>(4), std::vector<uint8_t>(4)).ok());
  EXPECT_TRUE(w.AddTensor("a", {32}, GgmlType::kQ8_0, std::vector<uint8_t>(34)).ok());
  auto dup = w.AddTensor("a", {1}, GgmlType::kF32, std::vector<uint8_t>(4));
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("duplicate"), std::string::npos);
}

TEST(GgufFile, OpensWrittenFileAndReportsMissingFile) {
  GgufWriter w(64);
  w.SetUint32("n", 5);
  std::vector<float> vals = {1, 2, 3, 4};
  std::vector<uint8_t> raw(16);
  std::memcpy(raw.data(), vals.data(), 16);
  ASSERT_TRUE(w.AddTensor("w", {4}, GgmlType::kF32, raw).ok());
  const std::string path = ::testing::TempDir() + "/kvpack_gguf_test.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->GetInt("n").value(), 5);
  EXPECT_EQ((*f)->file_size(), w.Serialize().size());
  const GgufTensorInfo* t = (*f)->FindTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::memcmp(t->data, raw.data(), 16), 0);
  std::remove(path.c_str());

  auto missing = GgufFile::Open(path + ".does-not-exist");
  EXPECT_EQ(missing.status().code(), StatusCode::kIo);
  EXPECT_NE(missing.status().message().find("does-not-exist"), std::string::npos);
  auto dir = GgufFile::Open(::testing::TempDir());
  EXPECT_FALSE(dir.ok());
  EXPECT_FALSE(w.WriteFile("/nonexistent-dir/x.gguf").ok());
}

// Version 2 shares v3's layout (64-bit counts and lengths); write one by hand.
TEST(GgufFile, ReadsHandWrittenVersion2) {
  Bytes b;
  b.Header(2, 1, 2).KvStr("general.architecture", "llama").KvU32("llama.block_count", 2);
  b.Tensor("x", {2, 2}, /*f32*/ 0, 0).PadTo(32);
  const size_t data_at = b.b.size();
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) b.Put(v);
  auto f = Parse(b.b);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->data_offset(), data_at);
  EXPECT_EQ((*f)->GetString("general.architecture").value(), "llama");
  EXPECT_EQ((*f)->GetInt("llama.block_count").value(), 2);
  const GgufTensorInfo* t = (*f)->FindTensor("x");
  ASSERT_NE(t, nullptr);
  float got[4];
  std::memcpy(got, t->data, 16);
  EXPECT_EQ(got[3], 4.0f);
}

TEST(GgufFile, NoTensorsAndNoPaddingIsValid) {
  Bytes b;
  b.Header(3, 0, 1).KvU32("a", 1);
  auto f = Parse(b.b);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE((*f)->tensors().empty());
}

struct BadCase {
  const char* name;
  std::vector<uint8_t> bytes;
  const char* expect;  // substring the error message must contain
};

std::vector<BadCase> BadCases() {
  std::vector<BadCase> cases;
  auto add = [&](const char* name, Bytes b, const char* expect) {
    cases.push_back({name, std::move(b.b), expect});
  };
  // A valid one-tensor file with a hook to alter pieces.
  auto one_tensor = [](std::vector<int64_t> ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    Bytes b;
    b.Header(3, 1, 0).Tensor("w", ne, type, offset).PadTo(32).Zeros(data_bytes);
    return b;
  };
  add("empty", Bytes(), "magic");
  add("short magic", Bytes().Raw("GG"), "truncated");
  add("bad magic", Bytes().Raw("GGML").U32(3).U64(0).U64(0), "bad magic");
  add("version 1", Bytes().Header(1, 0, 0), "version 1");
  add("version 4", Bytes().Header(4, 0, 0), "unsupported GGUF version 4");
  add("big endian", Bytes().Raw("GGUF").U32(0x03000000u).U64(0).U64(0), "big-endian");
  add("truncated version", Bytes().Raw("GGUF").U8(3), "version");
  add("truncated tensor count", Bytes().Raw("GGUF").U32(3).U32(0), "tensor count");
  add("truncated kv count", Bytes().Raw("GGUF").U32(3).U64(0).U32(0), "metadata kv count");
  add("lying kv count", Bytes().Header(3, 0, 1ull << 60), "metadata kv count");
  add("lying tensor count", Bytes().Header(3, 1ull << 60, 0), "tensor count");
  add("lying kv and tensor counts", Bytes().Header(3, 1, 2).Zeros(40), "cannot fit");
  add("key length beyond file", Bytes().Header(3, 0, 1).U64(1ull << 40).U32(4).U8(0),
      "string length");
  add("truncated key", Bytes().Header(3, 0, 1).U64(20).Zeros(10), "metadata kv #0 (key)");
  add("unknown value type", Bytes().Header(3, 0, 1).Str("k").U32(13).U32(0),
      "unknown value type 13");
  add("truncated value", Bytes().Header(3, 0, 1).Str("k").U32(10).U32(0), "'k'");
  add("string value beyond file",
      Bytes().Header(3, 0, 1).Str("k").U32(8).U64(1000).Raw("abc"), "string length 1000");
  add("invalid bool", Bytes().Header(3, 0, 1).Str("k").U32(7).U8(2), "invalid bool");
  add("lying array count", Bytes().Header(3, 0, 1).Str("k").U32(9).U32(4).U64(1ull << 40),
      "array count");
  add("lying string array count",
      Bytes().Header(3, 0, 1).Str("k").U32(9).U32(8).U64(4).U64(0).U64(0), "array count 4");
  add("unknown array element type", Bytes().Header(3, 0, 1).Str("k").U32(9).U32(77).U64(0),
      "unknown array element value type 77");
  {
    Bytes b;
    b.Header(3, 0, 1).Str("k").U32(9);
    for (int i = 0; i < 9; ++i) b.U32(9).U64(1);  // arrays of arrays, 9 levels deep
    b.U32(0).U64(0);
    add("arrays nested too deep", b,
        "metadata key 'k'[0][0][0][0][0][0][0][0]: arrays nested deeper than 8");
  }
  add("truncated array element",
      Bytes().Header(3, 0, 1).Str("k").U32(9).U32(8).U64(2).Str("a").U64(5), "metadata key 'k'[1]");
  add("duplicate key", Bytes().Header(3, 0, 2).KvU32("k", 1).KvU32("k", 2),
      "duplicate metadata key 'k'");
  add("alignment zero", Bytes().Header(3, 0, 1).KvU32("general.alignment", 0), "power of two");
  add("alignment 48", Bytes().Header(3, 0, 1).KvU32("general.alignment", 48), "power of two");
  add("alignment string", Bytes().Header(3, 0, 1).KvStr("general.alignment", "32"),
      "general.alignment must be an integer");
  add("n_dims 0", Bytes().Header(3, 1, 0).Str("w").U32(0).Zeros(64), "n_dims 0");
  add("n_dims 5", Bytes().Header(3, 1, 0).Str("w").U32(5).Zeros(64), "n_dims 5");
  add("negative dim", one_tensor({4, -1}, 0, 0, 64), "ne[1] = -1 is not positive");
  add("zero dim", one_tensor({0}, 0, 0, 64), "ne[0] = 0 is not positive");
  add("element count overflow", one_tensor({1ll << 32, 1ll << 32}, 0, 0, 64),
      "element count overflows");
  add("byte size overflow", one_tensor({1ll << 62}, 0, 0, 64), "byte size overflows");
  add("unknown ggml type", one_tensor({4}, 4, 0, 64), "unknown ggml type id 4");
  add("unknown ggml type 1000", one_tensor({4}, 1000, 0, 64), "unknown ggml type id 1000");
  add("ne0 not block multiple", one_tensor({33}, 8, 0, 64), "not a multiple of the q8_0 block");
  add("offset not aligned", one_tensor({4}, 0, 8, 64), "not a multiple of the alignment");
  add("data beyond file", one_tensor({64}, 0, 0, 100), "outside");
  add("offset beyond file", one_tensor({4}, 0, 1ull << 40, 64), "outside");
  add("offset overflow", one_tensor({4}, 0, ~uint64_t{31}, 64), "outside");
  // A long string value lets a truncated tensor info pass the up-front count check.
  const std::string pad(64, 'x');
  add("truncated dims", Bytes().Header(3, 1, 1).KvStr("pad", pad).Str("w").U32(2).I64(4),
      "truncated file: tensor 'w' ne[1]");
  add("truncated tensor offset",
      Bytes().Header(3, 1, 1).KvStr("pad", pad).Str("w").U32(1).I64(4).U32(0).U32(0),
      "truncated file: tensor 'w' (offset)");
  add("truncated tensor type",
      Bytes().Header(3, 1, 1).KvStr("pad", pad).Str("w").U32(1).I64(4).U8(0),
      "truncated file: tensor 'w' (type)");
  // The infos end at byte 57; the data section would start at 64, past the end of the file.
  add("data section beyond file", Bytes().Header(3, 1, 0).Tensor("w", {1}, 0, 0),
      "data section would start at offset 64");
  {
    Bytes b;
    b.Header(3, 2, 0).Tensor("w", {4}, 0, 0).Tensor("w", {4}, 0, 32).PadTo(32).Zeros(64);
    add("duplicate tensor", b, "duplicate tensor name 'w'");
  }
  {
    Bytes b;
    b.Header(3, 2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {4}, 0, 32).PadTo(32).Zeros(64);
    add("overlapping tensors", b, "overlaps");
  }
  return cases;
}

TEST(GgufMalformed, EveryCaseIsAnErrorNamingTheProblem) {
  for (const BadCase& c : BadCases()) {
    auto f = Parse(c.bytes);
    ASSERT_FALSE(f.ok()) << c.name;
    const std::string& msg = f.status().message();
    EXPECT_NE(msg.find(c.expect), std::string::npos)
        << c.name << ": message \"" << msg << "\" lacks \"" << c.expect << "\"";
    EXPECT_NE(msg.find("test.gguf"), std::string::npos) << c.name << ": " << msg;
  }
}

// Every prefix of a valid file is either an error or (once all tensor data is present) a
// valid file; nothing in between crashes. Every single-byte corruption likewise.
TEST(GgufMalformed, PrefixesAndByteFlipsNeverCrash) {
  GgufWriter w(64);
  for (const GgufKeyValue& kv : AllValueTypes()) w.Set(kv.key, kv.value);
  ASSERT_TRUE(w.AddTensor("a", {32, 2}, GgmlType::kQ8_0, RandomBytes(68, 3)).ok());
  ASSERT_TRUE(w.AddTensor("b", {3}, GgmlType::kF32, RandomBytes(12, 4)).ok());
  const std::vector<uint8_t> full = w.Serialize();
  auto ok = Parse(full);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  const size_t data_offset = (*ok)->data_offset();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    auto f = Parse(prefix);
    if (n < data_offset) {
      EXPECT_FALSE(f.ok()) << "prefix " << n;
    }
  }
  for (size_t i = 0; i < data_offset; ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bad = full;
      bad[i] ^= x;
      auto f = Parse(bad);
      (void)f;
    }
  }
}

TEST(GgufFile, BundledStories260K) {
  auto f = GgufFile::Open(std::string(KVPACK_SOURCE_DIR) + "/models/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.tensors().size(), 48u);
  EXPECT_EQ(g.metadata().size(), 19u);
  EXPECT_EQ(g.GetInt("llama.embedding_length").value(), 64);
  EXPECT_EQ(g.GetString("general.architecture").value(), "llama");
  const GgufTensorInfo* emb = g.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->type, GgmlType::kF32);
  EXPECT_EQ(emb->n_bytes, 64u * 512u * 4u);
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens").value().size(), 512u);
}

// Regenerates the fuzz seeds: run with
//   test_io --gtest_also_run_disabled_tests --gtest_filter='*WriteFuzzSeeds*'
TEST(GgufFuzzSeeds, DISABLED_WriteFuzzSeeds) {
  const std::string dir = std::string(KVPACK_SOURCE_DIR) + "/tests/fuzz/seeds/";
  {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetUint32("llama.block_count", 1);
    w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "a", "b"});
    w.SetFloat32Array("tokenizer.ggml.scores", {0, -1, -2});
    w.SetInt32Array("tokenizer.ggml.token_type", {2, 1, 1});
    ASSERT_TRUE(w.AddTensor("token_embd.weight", {4, 3}, GgmlType::kF32,
                            RandomBytes(48, 1)).ok());
    ASSERT_TRUE(w.AddTensor("q8", {32, 2}, GgmlType::kQ8_0, RandomBytes(68, 2)).ok());
    ASSERT_TRUE(w.WriteFile(dir + "tiny_llama.gguf").ok());
  }
  {
    GgufWriter w(64);
    for (const GgufKeyValue& kv : AllValueTypes()) w.Set(kv.key, kv.value);
    ASSERT_TRUE(w.AddTensor("f16", {8}, GgmlType::kF16, RandomBytes(16, 3)).ok());
    ASSERT_TRUE(w.AddTensor("q4_0", {32}, GgmlType::kQ4_0, RandomBytes(18, 4)).ok());
    ASSERT_TRUE(w.WriteFile(dir + "all_types_align64.gguf").ok());
  }
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("q4_K", {256}, GgmlType::kQ4_K, RandomBytes(144, 5)).ok());
    ASSERT_TRUE(w.AddTensor("q6_K", {256}, GgmlType::kQ6_K, RandomBytes(210, 6)).ok());
    ASSERT_TRUE(w.AddTensor("bf16", {2, 2, 2, 2}, GgmlType::kBF16, RandomBytes(32, 7)).ok());
    ASSERT_TRUE(w.WriteFile(dir + "k_quants.gguf").ok());
  }
}

}  // namespace
}  // namespace kvpack
