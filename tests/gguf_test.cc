// The GGUF reader and writer: round trips of every metadata type, tensor
// type and alignment; a hand-built v2 file; and hostile input — truncation
// at every header byte, seeded byte flips, absurd counts and lengths — each
// of which must give tessera::Error naming the problem, never a crash, an
// out-of-bounds read (run under ASan) or a tensor pointing past the end.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "util/test_util.h"

namespace tessera {
namespace {

using gguf::Array;
using gguf::Value;
using gguf::ValueType;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"

// ---- building images by hand ----------------------------------------------

// Little-endian bytes, appended field by field.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& append(const Bytes& o) {
    b.insert(b.end(), o.b.begin(), o.b.end());
    return *this;
  }
};

Bytes kv_u32(std::string_view key, uint32_t v) {
  return Bytes().str(key).u32(static_cast<uint32_t>(ValueType::kU32)).u32(v);
}
Bytes kv_str(std::string_view key, std::string_view v) {
  return Bytes().str(key).u32(static_cast<uint32_t>(ValueType::kString)).str(v);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;  // F32
  uint64_t offset = 0;
};

// A GGUF image: header, the given (already encoded) metadata entries, tensor
// infos, padding to `alignment`, then `data_bytes` of data. The counts in
// the header are the real ones unless overridden.
struct ImageSpec {
  uint32_t magic = kMagic;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;
  std::vector<Bytes> kvs;
  std::vector<TensorSpec> tensors;
  uint64_t alignment = 32;
  size_t data_bytes = 0;
};

std::vector<uint8_t> build(const ImageSpec& s) {
  Bytes out;
  out.u32(s.magic).u32(s.version);
  out.u64(s.n_tensors.value_or(s.tensors.size())).u64(s.n_kv.value_or(s.kvs.size()));
  for (const Bytes& kv : s.kvs) out.append(kv);
  for (const TensorSpec& t : s.tensors) {
    out.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) out.u64(n);
    out.u32(t.type).u64(t.offset);
  }
  out.b.resize((out.b.size() + s.alignment - 1) / s.alignment * s.alignment + s.data_bytes, 0);
  return out.b;
}

// A copy in a heap block of exactly n bytes, so that ASan reports any read
// past the end of the image.
std::unique_ptr<uint8_t[]> exact_copy(const uint8_t* data, size_t n) {
  std::unique_ptr<uint8_t[]> p(new uint8_t[n]);
  if (n != 0) std::memcpy(p.get(), data, n);
  return p;
}

// Reads every metadata value and the first and last byte of every tensor,
// asserting that each tensor lies inside [base, base + size).
uint64_t touch(const Array& a);
uint64_t touch(const Value& v) {
  uint64_t h = static_cast<uint64_t>(v.i) ^ v.u ^ static_cast<uint64_t>(std::isnan(v.f) ? 0 : v.f) ^ v.s.size();
  if (v.type == ValueType::kArray) h ^= touch(*v.array);
  return h;
}
uint64_t touch(const Array& a) {
  uint64_t h = a.size();
  for (int64_t i : a.ints) h += static_cast<uint64_t>(i);
  for (uint64_t u : a.uints) h += u;
  for (double f : a.floats) h += std::isnan(f) ? 1 : static_cast<uint64_t>(std::fabs(f) < 1e18 ? f : 0);
  for (const auto& s : a.strings) h += s.size();
  for (const Array& sub : a.arrays) h += touch(sub);
  return h;
}
void touch_all(const gguf::File& f, const uint8_t* base, size_t size) {
  volatile uint64_t sink = 0;
  for (const auto& [k, v] : f.metadata()) sink = sink + k.size() + touch(v);
  for (const gguf::TensorInfo& t : f.tensors()) {
    ASSERT_GE(t.data, base) << t.name;
    ASSERT_GT(t.n_bytes, 0u) << t.name;
    ASSERT_LE(static_cast<size_t>(t.data - base), size) << t.name;
    ASSERT_LE(t.n_bytes, size - static_cast<size_t>(t.data - base)) << t.name;
    sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
}

gguf::File parse(const std::vector<uint8_t>& image) {
  return gguf::File::parse(image.data(), image.size(), "test.gguf");
}

// The image must be rejected with Error(kCorruptFile) whose message contains
// `needle`.
void expect_corrupt(const std::vector<uint8_t>& image, std::string_view needle) {
  const auto copy = exact_copy(image.data(), image.size());
  try {
    gguf::File::parse(copy.get(), image.size(), "test.gguf");
    ADD_FAILURE() << "parsed; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos)
        << "message '" << e.what() << "' does not contain '" << needle << "'";
  }
}

// ---- values -----------------------------------------------------------------

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}
Value u_val(ValueType t, uint64_t x) { Value v = scalar(t); v.u = x; return v; }
Value i_val(ValueType t, int64_t x) { Value v = scalar(t); v.i = x; return v; }
Value f_val(ValueType t, double x) { Value v = scalar(t); v.f = x; return v; }
Value s_val(std::string x) { Value v = scalar(ValueType::kString); v.s = std::move(x); return v; }
Value arr_val(Array a) {
  Value v = scalar(ValueType::kArray);
  v.array = std::make_shared<Array>(std::move(a));
  return v;
}
Array arr(ValueType t) {
  Array a;
  a.elem_type = t;
  return a;
}

void expect_array_eq(const Array& a, const Array& b, const std::string& where);
void expect_value_eq(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  switch (a.type) {
    case ValueType::kString: EXPECT_EQ(a.s, b.s) << where; break;
    case ValueType::kArray: expect_array_eq(*a.array, *b.array, where); break;
    case ValueType::kF32: case ValueType::kF64: EXPECT_EQ(a.f, b.f) << where; break;
    case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kU64:
      EXPECT_EQ(a.u, b.u) << where;
      break;
    default: EXPECT_EQ(a.i, b.i) << where; break;
  }
}
void expect_array_eq(const Array& a, const Array& b, const std::string& where) {
  ASSERT_EQ(a.elem_type, b.elem_type) << where;
  EXPECT_EQ(a.ints, b.ints) << where;
  EXPECT_EQ(a.uints, b.uints) << where;
  EXPECT_EQ(a.floats, b.floats) << where;
  EXPECT_EQ(a.strings, b.strings) << where;
  ASSERT_EQ(a.arrays.size(), b.arrays.size()) << where;
  for (size_t i = 0; i < a.arrays.size(); ++i) expect_array_eq(a.arrays[i], b.arrays[i], where + "[" + std::to_string(i) + "]");
}

// One key per metadata type at its extremes, arrays of every element type,
// empty arrays, and arrays of arrays (nested twice, ragged, empty).
std::vector<std::pair<std::string, Value>> every_metadata_type() {
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("t.u8", u_val(ValueType::kU8, 255));
  kv.emplace_back("t.i8", i_val(ValueType::kI8, -128));
  kv.emplace_back("t.u16", u_val(ValueType::kU16, 65535));
  kv.emplace_back("t.i16", i_val(ValueType::kI16, -32768));
  kv.emplace_back("t.u32", u_val(ValueType::kU32, 4294967295u));
  kv.emplace_back("t.i32", i_val(ValueType::kI32, std::numeric_limits<int32_t>::min()));
  kv.emplace_back("t.u64", u_val(ValueType::kU64, std::numeric_limits<uint64_t>::max()));
  kv.emplace_back("t.i64", i_val(ValueType::kI64, std::numeric_limits<int64_t>::min()));
  kv.emplace_back("t.f32", f_val(ValueType::kF32, -1.5e-38));  // float-exact after rounding below
  kv.back().second.f = static_cast<float>(kv.back().second.f);
  kv.emplace_back("t.f32.inf", f_val(ValueType::kF32, std::numeric_limits<double>::infinity()));
  kv.emplace_back("t.f64", f_val(ValueType::kF64, 1e300));
  kv.emplace_back("t.bool.true", i_val(ValueType::kBool, 1));
  kv.emplace_back("t.bool.false", i_val(ValueType::kBool, 0));
  kv.emplace_back("t.string", s_val(std::string("h\xc3\xa9llo\0world", 12)));
  kv.emplace_back("t.string.empty", s_val(""));
  kv.emplace_back("", s_val("an empty key is legal"));

  Array a = arr(ValueType::kU8); a.uints = {0, 1, 255};
  kv.emplace_back("a.u8", arr_val(a));
  a = arr(ValueType::kI8); a.ints = {-128, 0, 127};
  kv.emplace_back("a.i8", arr_val(a));
  a = arr(ValueType::kU16); a.uints = {65535, 7};
  kv.emplace_back("a.u16", arr_val(a));
  a = arr(ValueType::kI16); a.ints = {-32768, 32767};
  kv.emplace_back("a.i16", arr_val(a));
  a = arr(ValueType::kU32); a.uints = {4294967295u};
  kv.emplace_back("a.u32", arr_val(a));
  a = arr(ValueType::kI32); a.ints = {-1, 2, -3};
  kv.emplace_back("a.i32", arr_val(a));
  a = arr(ValueType::kU64); a.uints = {std::numeric_limits<uint64_t>::max(), 0};
  kv.emplace_back("a.u64", arr_val(a));
  a = arr(ValueType::kI64); a.ints = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  kv.emplace_back("a.i64", arr_val(a));
  a = arr(ValueType::kF32); a.floats = {0.25, -2.0, 0x1.8p+33};  // exactly representable as f32
  kv.emplace_back("a.f32", arr_val(a));
  a = arr(ValueType::kF64); a.floats = {1e-300, -0.1};
  kv.emplace_back("a.f64", arr_val(a));
  a = arr(ValueType::kBool); a.ints = {1, 0, 1};
  kv.emplace_back("a.bool", arr_val(a));
  a = arr(ValueType::kString); a.strings = {"", "x", std::string(300, 'y')};
  kv.emplace_back("a.string", arr_val(a));
  for (ValueType t : {ValueType::kU8, ValueType::kI64, ValueType::kF32, ValueType::kString, ValueType::kArray}) {
    kv.emplace_back("a.empty." + std::string(gguf::value_type_name(t)), arr_val(arr(t)));
  }
  Array inner1 = arr(ValueType::kI32); inner1.ints = {1, 2};
  Array inner2 = arr(ValueType::kI32); inner2.ints = {3};
  Array inner3 = arr(ValueType::kString); inner3.strings = {"p", "q"};
  Array nested = arr(ValueType::kArray);
  nested.arrays = {inner1, inner2, arr(ValueType::kI32)};
  kv.emplace_back("a.nested", arr_val(nested));
  Array deep = arr(ValueType::kArray);
  Array mid = arr(ValueType::kArray);
  mid.arrays = {inner3, arr(ValueType::kF64)};
  deep.arrays = {mid, arr(ValueType::kArray)};
  kv.emplace_back("a.nested.deep", arr_val(deep));
  return kv;
}

struct TensorCase {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
};

// Odd byte counts (so padding between tensors matters) and every dim count.
std::vector<TensorCase> tensor_cases() {
  return {{"a.f32", DType::kF32, {7}},
          {"b.f16", DType::kF16, {3, 5}},
          {"c.bf16", DType::kBF16, {2, 3, 4}},
          {"d.q8_0", DType::kQ8_0, {64, 3}},
          {"e.q4_0", DType::kQ4_0, {32, 1, 3, 2}},
          {"f.i8", DType::kI8, {5}},
          {"g.q6_k", DType::kQ6_K, {256}}};
}

uint8_t pattern(size_t tensor, size_t i) { return static_cast<uint8_t>(i * 131 + tensor * 17 + 5); }

std::string write_round_trip_file(uint64_t alignment, const std::string& path) {
  gguf::Writer w(alignment);
  for (const auto& [k, v] : every_metadata_type()) w.set_value(k, v);
  const auto cases = tensor_cases();
  for (size_t ti = 0; ti < cases.size(); ++ti) {
    w.add_tensor(cases[ti].name, cases[ti].type, cases[ti].ne, [ti](uint8_t* out, size_t n) {
      for (size_t i = 0; i < n; ++i) out[i] = pattern(ti, i);
    });
  }
  w.write(path);
  return path;
}

// ---- round trips ------------------------------------------------------------

class RoundTrip : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RoundTrip, EveryMetadataTypeAndTensorSurvives) {
  const uint64_t alignment = GetParam();
  const std::string path =
      write_round_trip_file(alignment, testing::temp_path("rt" + std::to_string(alignment) + ".gguf"));
  const gguf::File f = gguf::File::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);

  auto expected = every_metadata_type();
  if (alignment != 32) expected.emplace_back("general.alignment", u_val(ValueType::kU32, alignment));
  ASSERT_EQ(f.metadata().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, expected[i].first) << "entry " << i;
    expect_value_eq(f.metadata()[i].second, expected[i].second, expected[i].first);
    ASSERT_NE(f.find(expected[i].first), nullptr) << expected[i].first;
  }

  const auto cases = tensor_cases();
  ASSERT_EQ(f.tensors().size(), cases.size());
  const std::string bytes = testing::read_file(path);
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t ti = 0; ti < cases.size(); ++ti) {
    const gguf::TensorInfo& t = f.tensor(cases[ti].name);
    EXPECT_EQ(&t, &f.tensors()[ti]);
    EXPECT_EQ(t.type, cases[ti].type);
    ASSERT_EQ(t.n_dims, static_cast<int>(cases[ti].ne.size()));
    int64_t rows = 1;
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(t.ne[d], d < t.n_dims ? cases[ti].ne[d] : 1) << t.name << " dim " << d;
      if (d > 0) rows *= t.ne[d];
    }
    EXPECT_EQ(t.n_bytes, row_bytes(t.type, t.ne[0]) * static_cast<size_t>(rows)) << t.name;
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    // The data is where the file says, byte for byte.
    const size_t at = f.data_offset() + t.offset;
    ASSERT_LE(at + t.n_bytes, bytes.size());
    for (size_t i = 0; i < t.n_bytes; ++i) {
      ASSERT_EQ(t.data[i], pattern(ti, i)) << t.name << " byte " << i;
      ASSERT_EQ(base[at + i], pattern(ti, i)) << t.name << " byte " << i;
    }
  }
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, RoundTrip, ::testing::Values(32, 64, 1, 256));

TEST(GgufWriter, ExplicitAlignmentKeyGovernsThePadding) {
  // Setting general.alignment as metadata (as a copied model does) must pad
  // to that value, not to the writer's default.
  gguf::Writer w;
  w.set_u32("general.alignment", 128);
  w.add_tensor("a", DType::kF32, {3}, [](uint8_t* out, size_t n) { std::memset(out, 1, n); });
  w.add_tensor("b", DType::kF32, {5}, [](uint8_t* out, size_t n) { std::memset(out, 2, n); });
  const std::string path = testing::temp_path("align128.gguf");
  w.write(path);
  const gguf::File f = gguf::File::open(path);
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.data_offset() % 128, 0u);
  EXPECT_EQ(f.tensor("b").offset, 128u);
  EXPECT_EQ(f.tensor("b").data[0], 2);
  EXPECT_EQ(f.tensor("a").data[11], 1);
}

TEST(GgufWriter, RejectsWhatTheReaderWouldRefuse) {
  EXPECT_THROW(gguf::Writer(0), Error);
  EXPECT_THROW(gguf::Writer(48), Error);
  gguf::Writer w;
  w.add_tensor("t", DType::kF32, {4}, [](uint8_t*, size_t) {});
  EXPECT_THROW(w.add_tensor("t", DType::kF32, {4}, [](uint8_t*, size_t) {}), Error);
  EXPECT_THROW(w.add_tensor("q", DType::kQ8_0, {33}, [](uint8_t*, size_t) {}), Error);
  EXPECT_THROW(w.add_tensor("z", DType::kF32, {4, 0}, [](uint8_t*, size_t) {}), Error);
  EXPECT_THROW(w.add_tensor("five", DType::kF32, {1, 1, 1, 1, 1}, [](uint8_t*, size_t) {}), Error);
  gguf::Writer bad_alignment_key;
  bad_alignment_key.set_u32("general.alignment", 24);
  EXPECT_THROW(bad_alignment_key.write(testing::temp_path("never.gguf")), Error);
}

TEST(Gguf, Version2FileBuiltByHand) {
  // GGUF v2 has the v3 layout (v3 only added big-endian files): u64 counts
  // and string lengths.
  ImageSpec s;
  s.version = 2;
  s.kvs.push_back(kv_str("general.architecture", "llama"));
  s.kvs.push_back(kv_u32("answer", 42));
  s.kvs.push_back(Bytes().str("arr").u32(static_cast<uint32_t>(ValueType::kArray))
                      .u32(static_cast<uint32_t>(ValueType::kI16)).u64(3)
                      .put<int16_t>(-7).put<int16_t>(0).put<int16_t>(9));
  s.tensors.push_back({"w", {4, 2}, 0, 0});
  s.tensors.push_back({"h", {16}, 1, 32});
  s.data_bytes = 64;
  std::vector<uint8_t> image = build(s);
  const size_t data_at = image.size() - 64;
  const float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(image.data() + data_at, w, sizeof w);
  const gguf::File f = parse(image);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.data_offset(), data_at);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("answer"), 42u);
  EXPECT_EQ(gguf::array_as_ints(f.get_array("arr"), "arr"), (std::vector<int64_t>{-7, 0, 9}));
  const gguf::TensorInfo& t = f.tensor("w");
  EXPECT_EQ(t.shape_string(), "[4, 2]");
  float back[8];
  std::memcpy(back, t.data, sizeof back);
  EXPECT_EQ(std::memcmp(back, w, sizeof w), 0);
  EXPECT_EQ(f.tensor("h").data, image.data() + data_at + 32);
  EXPECT_EQ(f.tensor("h").n_bytes, 32u);
}

TEST(Gguf, TypedGettersNameTheKeyAndType) {
  ImageSpec s;
  s.kvs.push_back(kv_u32("n", 7));
  s.kvs.push_back(kv_str("s", "text"));
  s.kvs.push_back(Bytes().str("neg").u32(static_cast<uint32_t>(ValueType::kI32)).put<int32_t>(-3));
  s.kvs.push_back(Bytes().str("big").u32(static_cast<uint32_t>(ValueType::kU64)).u64(uint64_t{1} << 63));
  s.kvs.push_back(Bytes().str("fa").u32(static_cast<uint32_t>(ValueType::kArray))
                      .u32(static_cast<uint32_t>(ValueType::kF32)).u64(1).put<float>(0.5f));
  s.kvs.push_back(Bytes().str("ua").u32(static_cast<uint32_t>(ValueType::kArray))
                      .u32(static_cast<uint32_t>(ValueType::kU64)).u64(1).u64(uint64_t{1} << 63));
  const std::vector<uint8_t> image = build(s);
  const gguf::File f = parse(image);
  auto expect_error = [](auto&& fn, std::string_view needle) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos) << e.what();
    }
  };
  EXPECT_EQ(f.get_uint("n"), 7u);
  EXPECT_EQ(f.get_int("neg"), -3);
  EXPECT_EQ(f.get_float("n"), 7.0);
  EXPECT_EQ(f.get_uint_or("absent", 9), 9u);
  expect_error([&] { f.get_uint("absent"); }, "missing metadata key 'absent'");
  expect_error([&] { f.get_string("n"); }, "metadata 'n' has type u32, expected string");
  expect_error([&] { f.get_uint("neg"); }, "metadata 'neg' has type i32, expected a non-negative integer");
  expect_error([&] { f.get_int("big"); }, "metadata 'big' has type u64, expected an integer");
  expect_error([&] { f.get_bool_or("n", false); }, "expected bool");
  expect_error([&] { f.get_array("s"); }, "metadata 's' has type string, expected array");
  expect_error([&] { f.get_float("s"); }, "expected a number");
  expect_error([&] { gguf::array_as_ints(f.get_array("fa"), "fa"); }, "fa: expected an integer array, got an array of f32");
  expect_error([&] { gguf::array_as_ints(f.get_array("ua"), "ua"); }, "out of range");
  expect_error([&] { f.tensor("nope"); }, "missing tensor 'nope'");
  EXPECT_EQ(gguf::array_as_floats(f.get_array("fa"), "fa"), std::vector<float>{0.5f});
}

// ---- hostile input: one malformed field at a time --------------------------

Bytes kv_typed(std::string_view key, ValueType t) { return Bytes().str(key).u32(static_cast<uint32_t>(t)); }

// One valid F32 tensor of `ne` (data present) around an edited tensor info.
ImageSpec one_tensor(TensorSpec t, size_t data_bytes = 64) {
  ImageSpec s;
  s.tensors.push_back(std::move(t));
  s.data_bytes = data_bytes;
  return s;
}

TEST(GgufHostile, BaselineImagesParse) {
  // The images below differ from these in exactly one field.
  EXPECT_NO_THROW(parse(build(one_tensor({"t", {16}, 0, 0}))));
  ImageSpec s;
  s.kvs.push_back(kv_u32("a", 1));
  EXPECT_NO_THROW(parse(build(s)));
}

TEST(GgufHostile, WrongMagicAndVersions) {
  ImageSpec s;
  s.magic = 0x46554746;
  expect_corrupt(build(s), "not a GGUF file");
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    s = ImageSpec();
    s.version = v;
    expect_corrupt(build(s), "unsupported GGUF version " + std::to_string(v));
  }
  s = ImageSpec();
  s.version = 0x03000000;  // a v3 file written big-endian
  expect_corrupt(build(s), "big-endian");
}

TEST(GgufHostile, AbsurdCounts) {
  ImageSpec s;
  s.n_tensors = uint64_t{1} << 63;
  expect_corrupt(build(s), "tensor count 9223372036854775808 exceeds what the file can hold");
  s = ImageSpec();
  s.n_kv = uint64_t{1} << 40;
  expect_corrupt(build(s), "metadata count 1099511627776 exceeds what the file can hold");
  s = ImageSpec();
  s.kvs.push_back(kv_u32("a", 1));
  s.kvs.push_back(Bytes().str("b"));  // the file ends after the second key
  s.alignment = 1;                    // (no padding)
  expect_corrupt(build(s), "truncated reading b at offset 50");
}

TEST(GgufHostile, AbsurdStringLengths) {
  ImageSpec s;
  s.kvs.push_back(Bytes().u64(uint64_t{1} << 62).u32(0).u32(0));  // key length
  expect_corrupt(build(s), "metadata key has absurd length 4611686018427387904");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("k", ValueType::kString).u64(uint64_t{1} << 62));
  expect_corrupt(build(s), "k has absurd length");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("k", ValueType::kString).u64(1000).str("short"));
  expect_corrupt(build(s), "truncated reading k");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("k", ValueType::kArray).u32(static_cast<uint32_t>(ValueType::kString)).u64(2)
                      .str("ok").u64(uint64_t{1} << 62));
  expect_corrupt(build(s), "absurd length");
  s = one_tensor({"t", {16}, 0, 0});
  s.tensors[0].name = std::string(10, 'n');
  std::vector<uint8_t> image = build(s);
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(image.data() + 24, &huge, 8);  // the tensor name's length field
  expect_corrupt(image, "tensor name has absurd length");
}

TEST(GgufHostile, AbsurdArrays) {
  ImageSpec s;
  s.kvs.push_back(kv_typed("a", ValueType::kArray).u32(static_cast<uint32_t>(ValueType::kU8)).u64(uint64_t{1} << 60));
  expect_corrupt(build(s), "array 'a' claims 1152921504606846976 elements");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("a", ValueType::kArray).u32(static_cast<uint32_t>(ValueType::kArray)).u64(1)
                      .u32(static_cast<uint32_t>(ValueType::kU64)).u64(uint64_t{1} << 60));
  expect_corrupt(build(s), "claims 1152921504606846976 elements");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("a", ValueType::kArray).u32(42).u64(1));
  expect_corrupt(build(s), "'a' has unknown array element type 42");
  // Nesting deeper than the reader allows (each level one nested array).
  Bytes deep = kv_typed("deep", ValueType::kArray);
  for (int i = 0; i < 100; ++i) deep.u32(static_cast<uint32_t>(ValueType::kArray)).u64(1);
  deep.u32(static_cast<uint32_t>(ValueType::kU8)).u64(0);
  s = ImageSpec();
  s.kvs.push_back(deep);
  expect_corrupt(build(s), "nests arrays deeper");
}

TEST(GgufHostile, BadValues) {
  ImageSpec s;
  s.kvs.push_back(kv_typed("v", static_cast<ValueType>(13)).u32(0));
  expect_corrupt(build(s), "metadata 'v' has unknown value type 13");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("v", static_cast<ValueType>(0xffffffffu)).u32(0));
  expect_corrupt(build(s), "unknown value type 4294967295");
  s = ImageSpec();
  s.kvs.push_back(kv_typed("b", ValueType::kBool).put<uint8_t>(2));
  expect_corrupt(build(s), "bool 'b' has value 2");
  s = ImageSpec();
  s.kvs.push_back(kv_u32("a", 1));
  s.kvs.push_back(kv_str("a", "again"));
  expect_corrupt(build(s), "duplicate metadata key 'a'");
  for (uint32_t al : {0u, 3u, 48u, 1u << 17}) {
    s = ImageSpec();
    s.kvs.push_back(kv_u32("general.alignment", al));
    expect_corrupt(build(s), "general.alignment " + std::to_string(al) + " is not a power of two");
  }
  s = ImageSpec();
  s.kvs.push_back(kv_str("general.alignment", "32"));
  expect_corrupt(build(s), "general.alignment has type string");
}

TEST(GgufHostile, BadTensorInfos) {
  expect_corrupt(build(one_tensor({"t", {1, 1, 1, 1, 1}, 0, 0})), "tensor 't' has 5 dimensions");
  expect_corrupt(build(one_tensor({"t", {}, 0, 0})), "tensor 't' has 0 dimensions");
  expect_corrupt(build(one_tensor({"t", {4, 0}, 0, 0})), "tensor 't' has invalid dimension 1 = 0");
  expect_corrupt(build(one_tensor({"t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0})),
                 "tensor 't' has invalid dimension 1 = 4294967296");
  expect_corrupt(build(one_tensor({"t", {3, uint64_t{1} << 62}, 0, 0})), "invalid dimension 1");
  expect_corrupt(build(one_tensor({"t", {std::numeric_limits<uint64_t>::max()}, 0, 0})), "invalid dimension 0");
  expect_corrupt(build(one_tensor({"t", {16}, 99, 0})), "tensor 't' has unknown type 99");
  expect_corrupt(build(one_tensor({"t", {33}, 8, 0})), "not a multiple of the Q8_0 block size 32");
  expect_corrupt(build(one_tensor({"t", {uint64_t{1} << 40}, 0, 0})), "is larger than the file");
  expect_corrupt(build(one_tensor({"t", {16}, 0, 4})), "tensor 't' offset 4 is not a multiple of the alignment 32");
  expect_corrupt(build(one_tensor({"t", {16}, 0, uint64_t{1} << 40})), "extends past the end of the file");
  expect_corrupt(build(one_tensor({"t", {16}, 0, 32}, 64)), "extends past the end of the file");
  expect_corrupt(build(one_tensor({"t", {16}, 0, 0}, 63)), "extends past the end of the file");
  ImageSpec s = one_tensor({"t", {4}, 0, 0});
  s.tensors.push_back({"t", {4}, 0, 32});
  expect_corrupt(build(s), "duplicate tensor 't'");
  // The offset must fit the alignment the file declares, whatever it is.
  s = one_tensor({"t", {4}, 0, 64});
  s.kvs.push_back(kv_u32("general.alignment", 128));
  s.alignment = 128;
  s.data_bytes = 256;
  expect_corrupt(build(s), "offset 64 is not a multiple of the alignment 128");
}

// ---- hostile input: truncation and byte flips of real files --------------

// Parses the first `cut` bytes of `image` (in an exact-size heap block):
// true if it parsed, false if it threw tessera::Error.
bool parses_prefix(const std::string& image, size_t cut) {
  const auto copy = exact_copy(reinterpret_cast<const uint8_t*>(image.data()), cut);
  try {
    const gguf::File f = gguf::File::parse(copy.get(), cut, "cut.gguf");
    touch_all(f, copy.get(), cut);
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
    return false;
  }
}

// Every cut inside the header (metadata and tensor infos) and a stride of
// cuts through the data must throw: a tensor never points past the end.
void expect_truncations_rejected(const std::string& image, size_t stride) {
  const gguf::File whole = gguf::File::parse(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  uint64_t end = whole.data_offset();
  for (const auto& t : whole.tensors()) end = std::max<uint64_t>(end, whole.data_offset() + t.offset + t.n_bytes);
  ASSERT_EQ(end, image.size()) << "the file has trailing bytes: cuts there would parse";
  int failures = 0;
  auto check = [&](size_t cut) {
    if (parses_prefix(image, cut) && ++failures <= 5) ADD_FAILURE() << "prefix of " << cut << " bytes parsed";
  };
  for (size_t cut = 0; cut < whole.data_offset(); ++cut) check(cut);
  for (size_t cut = whole.data_offset(); cut < image.size(); cut += stride) check(cut);
  check(image.size() - 1);
  EXPECT_TRUE(parses_prefix(image, image.size()));
}

TEST(GgufTruncated, Stories260KAtEveryHeaderByte) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  expect_truncations_rejected(testing::read_file(testing::stories260k_path()), 16381);
}

TEST(GgufTruncated, WrittenFileAtEveryByte) {
  const std::string path = write_round_trip_file(64, testing::temp_path("trunc.gguf"));
  expect_truncations_rejected(testing::read_file(path), 1);
}

// Flips 1..8 bytes at seeded random positions (half of them in the header,
// where they matter most): the result must parse or throw Error, never crash
// or yield a tensor outside the image. One exact-size copy is flipped in
// place and restored after each try.
void flip_bytes(const std::string& original, size_t header_size, int iterations, uint64_t seed) {
  const size_t n = original.size();
  const auto image = exact_copy(reinterpret_cast<const uint8_t*>(original.data()), n);
  std::mt19937_64 rng(seed);
  int parsed = 0;
  for (int it = 0; it < iterations; ++it) {
    std::vector<size_t> flipped;
    const int n_flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n_flips; ++k) {
      flipped.push_back(rng() % (rng() % 2 ? header_size : n));
      image[flipped.back()] = static_cast<uint8_t>(rng());
    }
    try {
      const gguf::File f = gguf::File::parse(image.get(), n, "flipped.gguf");
      touch_all(f, image.get(), n);
      ++parsed;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCorruptFile) << e.what();
    }
    for (size_t at : flipped) image[at] = static_cast<uint8_t>(original[at]);
  }
  // Both outcomes must occur, or the flips were not exercising anything.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, iterations);
}

TEST(GgufFlipped, WrittenFile) {
  const std::string path = write_round_trip_file(32, testing::temp_path("flip.gguf"));
  const std::string image = testing::read_file(path);
  const gguf::File f = gguf::File::open(path);
  flip_bytes(image, f.data_offset(), 3000, 1);
}

TEST(GgufFlipped, Stories260K) {
  TESSERA_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
  const gguf::File f = gguf::File::open(testing::stories260k_path());
  flip_bytes(testing::read_file(testing::stories260k_path()), f.data_offset(), 2000, 2);
}

}  // namespace
}  // namespace tessera
