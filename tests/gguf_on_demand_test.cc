// GGUF files opened on demand (gguf::Mapping::kOnDemand: a tensor-parallel
// rank maps only its slices): the same metadata and tensors as the file
// mapped whole, every byte equal, whatever the header's size; a rank's rows
// and columns (model/weights.h) equal the whole matrix's; split models too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/weights.h"
#include "util/test_util.h"

namespace tessera {
namespace {

// A file whose header is larger than the first prefix parse_on_demand maps
// (1 MiB: so it has to map longer ones), with Q8_0, F16 and F32 tensors of
// odd sizes and random bytes (valid Q8_0 scales are not needed to compare bytes).
std::string big_header_file() {
  static const std::string path = [] {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    std::vector<std::string> words;
    for (int i = 0; i < 150000; ++i) words.push_back(fmt::format("token-{:08}", i));  // ~3 MB of header
    w.set_strings("test.words", words);
    const auto random_fill = [](uint32_t seed) {
      return [seed](uint8_t* out, size_t n) {
        std::mt19937 rng(seed);
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(rng());
      };
    };
    w.add_tensor("a.weight", DType::kQ8_0, {256, 96}, random_fill(1));
    w.add_tensor("b.weight", DType::kF16, {72, 33}, random_fill(2));
    w.add_tensor("c.weight", DType::kF32, {5}, random_fill(3));
    w.add_tensor("x.weight", DType::kQ8_0, {64, 48, 4}, random_fill(4));  // 4 experts of 48 x 64
    const std::string p = testing::temp_path("on_demand.gguf");
    w.write(p);
    return p;
  }();
  return path;
}

TEST(GgufOnDemand, SameHeaderAndEveryByteOfEveryTensor) {
  const gguf::File whole = gguf::File::open(big_header_file());
  const gguf::File lazy = gguf::File::open(big_header_file(), gguf::Mapping::kOnDemand);
  EXPECT_FALSE(whole.on_demand());
  ASSERT_TRUE(lazy.on_demand());
  EXPECT_EQ(lazy.get_array("test.words").strings, whole.get_array("test.words").strings);
  EXPECT_EQ(lazy.data_offset(), whole.data_offset());
  ASSERT_EQ(lazy.tensors().size(), whole.tensors().size());
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    const gguf::TensorInfo& w = whole.tensors()[i];
    const gguf::TensorInfo& l = lazy.tensors()[i];
    ASSERT_EQ(l.name, w.name);
    EXPECT_EQ(l.data, nullptr);  // nothing mapped until asked for
    ASSERT_EQ(l.n_bytes, w.n_bytes);
    EXPECT_EQ(std::memcmp(lazy.bytes(l), w.data, w.n_bytes), 0) << w.name;
    EXPECT_EQ(lazy.bytes(l), lazy.bytes(l)) << "a whole tensor is mapped once";
    const size_t begin = w.n_bytes / 3, n = w.n_bytes / 2;
    EXPECT_EQ(std::memcmp(lazy.bytes(l, begin, n), w.data + begin, n), 0) << w.name;
    std::vector<uint8_t> copy(n);
    lazy.read(l, begin, n, copy.data());
    EXPECT_EQ(std::memcmp(copy.data(), w.data + begin, n), 0) << w.name;
  }
}

TEST(GgufOnDemand, ARanksRowsAndColumnsEqualTheWholeMatrixs) {
  const gguf::File whole = gguf::File::open(big_header_file());
  const gguf::File lazy = gguf::File::open(big_header_file(), gguf::Mapping::kOnDemand);
  const kernels::WeightView all = load_matrix(whole, "a.weight", 256, 96);
  for (int64_t r0 : {0, 32, 48}) {
    const kernels::WeightView rows = load_matrix_rows(lazy, "a.weight", 256, 96, r0, 48);
    EXPECT_EQ(rows.rows, 48);
    EXPECT_EQ(rows.row_bytes, all.row_bytes);
    EXPECT_EQ(std::memcmp(rows.data, all.data + r0 * all.row_bytes, 48 * all.row_bytes), 0) << r0;
  }
  for (int64_t c0 : {0, 64, 128}) {
    const kernels::WeightView cols = load_matrix_cols(lazy, "a.weight", 256, 96, c0, 128);
    const kernels::WeightView view = matrix_cols(all, c0, 128);  // strided, into the whole mapping
    ASSERT_EQ(cols.cols, 128);
    ASSERT_EQ(cols.row_bytes, row_bytes(DType::kQ8_0, 128));  // a compact copy
    for (int64_t r = 0; r < 96; ++r) {
      ASSERT_EQ(std::memcmp(cols.data + r * cols.row_bytes, view.data + r * view.row_bytes, cols.row_bytes), 0)
          << "row " << r << " from column " << c0;
    }
    lazy.drop(cols.data);  // freed; the File no longer holds it
  }
  // Columns that are not whole blocks are refused, as for a mapped file.
  EXPECT_THROW(load_matrix_cols(lazy, "a.weight", 256, 96, 16, 128), Error);
  // Out-of-range bytes are an error, not a read past the tensor.
  EXPECT_THROW(lazy.bytes(lazy.tensor("c.weight"), 8, 16), Error);
}

// A mixture's 3-D tensor: expert e's rows and columns, as a rank takes them.
TEST(GgufOnDemand, AnExpertsRowsAndColumnsEqualItsPartOfTheWholeTensor) {
  const gguf::File whole = gguf::File::open(big_header_file());
  const gguf::File lazy = gguf::File::open(big_header_file(), gguf::Mapping::kOnDemand);
  const gguf::TensorInfo& t = whole.tensor("x.weight");
  const size_t rb = row_bytes(DType::kQ8_0, 64);
  for (int64_t e = 0; e < 4; ++e) {
    const kernels::WeightView rows = load_expert_rows(lazy, "x.weight", 64, 48, 4, e, 16, 24);
    ASSERT_EQ(rows.rows, 24);
    EXPECT_EQ(std::memcmp(rows.data, t.data + (e * 48 + 16) * rb, 24 * rb), 0) << "expert " << e;
    const kernels::WeightView cols = load_expert_cols(lazy, "x.weight", 64, 48, 4, e, 32, 32);
    ASSERT_EQ(cols.rows, 48);
    ASSERT_EQ(cols.row_bytes, row_bytes(DType::kQ8_0, 32));
    for (int64_t r = 0; r < 48; ++r) {
      ASSERT_EQ(std::memcmp(cols.data + r * cols.row_bytes, t.data + (e * 48 + r) * rb + cols.row_bytes, cols.row_bytes), 0)
          << "expert " << e << " row " << r;
    }
    // The same from the file mapped whole (views into it).
    const kernels::WeightView view = load_expert_cols(whole, "x.weight", 64, 48, 4, e, 32, 32);
    EXPECT_EQ(view.data, t.data + e * 48 * rb + cols.row_bytes);
  }
  // Rows past the expert's (into the next one's) are an error.
  EXPECT_THROW(load_expert_rows(lazy, "x.weight", 64, 48, 4, 0, 40, 16), Error);
  EXPECT_THROW(load_expert_rows(whole, "x.weight", 64, 48, 4, 0, 40, 16), Error);
  EXPECT_THROW(load_expert_rows(lazy, "x.weight", 64, 48, 4, 4, 0, 16), Error);
}

}  // namespace
}  // namespace tessera
