// tessera quantize (quant/quantize_model.h) on the real stories260K model:
//  * any shape: a matrix stored with zero columns padded to a whole block
//    (ffn_down, 172 -> 192) multiplies bit for bit as its zero-padded input
//    would, on every ISA this CPU has;
//  * the file holds exactly what quantizing in memory gives (every tensor's
//    bytes), and the loaded model's logits match the independent numpy
//    reference (tests/reference/compare_logits.py, which strips the padding
//    itself) within its derived tolerance;
//  * bad options and inputs are errors with a message, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/cpu.h"
#include "engine/sequence_runner.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "quant/grid.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"

namespace tessera::quant {
namespace {

TEST(AnyShape, PaddedMatmulEqualsZeroPaddedInput) {
  const int64_t rows = 37, cols = 172;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ3_K, DType::kF16}) {
    const int64_t block = dtype_traits(type).block_size;  // 172 -> 192 (Q4_0, Q8_0), 256 (Q4_K, Q3_K)
    const int64_t stored = (cols + block - 1) / block * block;  // F16 needs no padding: check plain use too
    std::vector<float> w(static_cast<size_t>(rows * stored), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cols; ++i) w[static_cast<size_t>(r * stored + i)] = nd(rng);
    }
    const size_t rb = row_bytes(type, stored);
    std::vector<uint8_t> data(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
      if (type == DType::kQ4_K || type == DType::kQ3_K) {  // written by the grid (Q4_K's padding columns are 0
                                                          // on its grid, not exactly 0)
        const Grid g = make_grid(type, 0);
        std::vector<int8_t> lv(static_cast<size_t>(stored));
        std::vector<float> sc(static_cast<size_t>(stored / g.block)), mn(sc.size());
        float* mins = g.affine ? mn.data() : nullptr;
        rtn_row(g, w.data() + r * stored, stored, {}, lv.data(), sc.data(), mins);
        pack_row(g, lv.data(), sc.data(), stored, data.data() + r * rb, mins);
      } else {
        kernels::quantize_row(type, w.data() + r * stored, data.data() + r * rb, stored);
      }
    }
    kernels::WeightView padded{type, data.data(), rows, stored, rb, cols};
    kernels::WeightView full{type, data.data(), rows, stored, rb, 0};
    for (const int64_t T : {1, 5}) {
      std::vector<float> x(static_cast<size_t>(T * cols)), xp(static_cast<size_t>(T * stored), 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < cols; ++i) xp[static_cast<size_t>(t * stored + i)] = x[static_cast<size_t>(t * cols + i)] = nd(rng);
      }
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (!isa_supported(isa)) continue;
        kernels::KernelContext ctx;
        ctx.isa = isa;
        std::vector<float> y(static_cast<size_t>(T * rows)), yp(y.size());
        kernels::matmul(padded, x.data(), cols, T, y.data(), rows, ctx);
        kernels::matmul(full, xp.data(), stored, T, yp.data(), rows, ctx);
        EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * sizeof(float)))
            << dtype_name(type) << " T=" << T << " isa " << isa_name(isa);
        const kernels::PreparedWeight prepared = kernels::prepare_weight(padded);
        kernels::matmul(prepared, x.data(), cols, T, y.data(), rows, ctx);
        EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * sizeof(float))) << "prepared " << dtype_name(type);
      }
    }
  }
  // More than a block of padding, or x narrower than the true width: refused.
  std::vector<uint8_t> data(row_bytes(DType::kQ4_0, 224) * 2);
  kernels::WeightView bad{DType::kQ4_0, data.data(), 2, 224, row_bytes(DType::kQ4_0, 224), 172};
  std::vector<float> x(2 * 224), y(4);
  EXPECT_THROW(kernels::matmul(bad, x.data(), 224, 2, y.data(), 2, {}), Error);
  kernels::WeightView ok{DType::kQ4_0, data.data(), 2, 192, row_bytes(DType::kQ4_0, 192), 172};
  EXPECT_THROW(kernels::matmul(ok, x.data(), 100, 2, y.data(), 2, {}), Error);
}

// Every tensor of `out` against quantizing `in`'s tensor in memory here.
void expect_file_is_in_memory_quantization(const gguf::File& in, const gguf::File& out, DType type) {
  const Grid g = make_grid(type, 0);
  for (const gguf::TensorInfo& t : in.tensors()) {
    const gguf::TensorInfo& q = out.tensor(t.name);
    if (t.n_dims != 2) {
      EXPECT_EQ(q.type, t.type) << t.name;
      ASSERT_EQ(q.n_bytes, t.n_bytes) << t.name;
      EXPECT_EQ(0, std::memcmp(q.data, t.data, t.n_bytes)) << t.name;
      continue;
    }
    const int64_t cols = t.ne[0], rows = t.ne[1], cols_p = (cols + g.unit() - 1) / g.unit() * g.unit();
    if (cols_p != cols && t.name == "token_embd.weight") {  // looked up, not multiplied: F16, never padded
      EXPECT_EQ(q.type, DType::kF16);
      EXPECT_EQ(q.ne[0], cols);
      continue;
    }
    ASSERT_EQ(q.type, type) << t.name;
    ASSERT_EQ(q.ne[0], cols_p) << t.name;
    EXPECT_EQ(out.has(kPaddedColsKey + t.name), cols_p != cols) << t.name;
    std::vector<float> w(static_cast<size_t>(cols_p), 0.0f), sc(static_cast<size_t>(cols_p / g.block));
    std::vector<float> mn(g.affine ? sc.size() : 0);
    std::vector<int8_t> lv(static_cast<size_t>(cols_p));
    std::vector<uint8_t> packed(row_bytes(type, cols_p));
    for (int64_t r = 0; r < rows; ++r) {
      kernels::dequantize_row(t.type, t.data + r * row_bytes(t.type, cols), w.data(), cols);
      rtn_row(g, w.data(), cols_p, {}, lv.data(), sc.data(), g.affine ? mn.data() : nullptr);
      pack_row(g, lv.data(), sc.data(), cols_p, packed.data(), g.affine ? mn.data() : nullptr);
      ASSERT_EQ(0, std::memcmp(packed.data(), q.data + r * packed.size(), packed.size())) << t.name << " row " << r;
    }
  }
}


TEST(Quantize, Stories260KQ4_0RoundTripsAndMatchesNumpy) {
  const auto& m = testing::stories260k();
  ThreadPool pool(2);
  const std::string path = testing::temp_path("s260k_q4_0.gguf");
  QuantizeOptions opt;
  opt.type = DType::kQ4_0;
  std::vector<TensorDone> done;
  const QuantizeResult res = quantize_model(*m.lm.file, path, opt, nullptr, pool,
                                            [&](const TensorDone& d) { done.push_back(d); });
  ASSERT_EQ(done.size(), m.lm.file->tensors().size());
  int padded = 0;
  for (const TensorDone& d : done) padded += d.padded_cols != 0;
  EXPECT_EQ(padded, 5);  // ffn_down of each of the 5 layers: 172 -> 192
  // Q4_0 is 4.5 bits a weight; the 5 padded matrices add 20 of 172 columns.
  EXPECT_GT(res.bits_per_weight(), 4.5);
  EXPECT_LT(res.bits_per_weight(), 4.5 * 1.05);

  const LoadedModel q = load_model(path);
  expect_file_is_in_memory_quantization(*m.lm.file, *q.file, DType::kQ4_0);

  testing::expect_logits_match_numpy(q, path, "q4_0-padded", pool);
}

// Rounds w to grid g's nearest levels, checks they are on the grid (and
// Q4_K's mins >= 0) and that the loader's dequantization of the packed row
// is bit for bit the grid's own dequantized row, which it returns.
std::vector<float> round_and_check_packing(const Grid& g, const std::vector<float>& w) {
  const int64_t n = static_cast<int64_t>(w.size());
  std::vector<int8_t> lv(w.size());
  std::vector<float> sc(w.size() / static_cast<size_t>(g.block)), mn(g.affine ? sc.size() : 0), deq(w.size()), back(w.size());
  float* mins = g.affine ? mn.data() : nullptr;
  rtn_row(g, w.data(), n, {}, lv.data(), sc.data(), mins);
  for (int8_t q : lv) EXPECT_TRUE(q >= g.qmin && q <= g.qmax) << int{q};
  for (float m : mn) EXPECT_GE(m, 0.0f);
  dequant_row(g, lv.data(), sc.data(), n, deq.data(), mins);
  std::vector<uint8_t> packed(row_bytes(g.type, n));
  pack_row(g, lv.data(), sc.data(), n, packed.data(), mins);
  kernels::dequantize_row(g.type, packed.data(), back.data(), n);
  EXPECT_EQ(0, std::memcmp(deq.data(), back.data(), deq.size() * sizeof(float))) << dtype_name(g.type);
  return deq;
}

double squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0.0;
  for (size_t i = 0; i < a.size(); ++i) e += std::pow(static_cast<double>(a[i]) - b[i], 2);
  return e;
}

// The super-block types as the grid writes them (llama.cpp's layouts), on
// rows of every kind: Gaussian, zero sub-blocks, an outlier, tiny values
// (fp16 subnormal scales), all of one sign (round_and_check_packing). On
// Gaussian rows Q4_K's error is below Q4_0's at the same 4.5 bits per
// weight, Q3_K's (3.4375 bits) below that of 3-bit values in Q4_0 blocks
// (4.5 bits), Q5_K's below Q4_K's, Q6_K's below Q5_K's, and Q2_K's (2.625
// bits) below 2-bit values in Q4_0 blocks.
TEST(Quantize, SuperBlockGridsPackWhatTheyRound) {
  for (const auto& [type, other_type, other_bits] :
       {std::tuple{DType::kQ4_K, DType::kQ4_0, 4}, std::tuple{DType::kQ3_K, DType::kQ4_0, 3},
        std::tuple{DType::kQ5_K, DType::kQ4_K, 4}, std::tuple{DType::kQ6_K, DType::kQ5_K, 5},
        std::tuple{DType::kQ2_K, DType::kQ4_0, 2}}) {
    SCOPED_TRACE(dtype_name(type));
    const Grid g = make_grid(type, 0), other = make_grid(other_type, other_bits);
    std::mt19937 rng(17);
    std::normal_distribution<float> nd;
    const int64_t n = 1024;
    double err = 0.0, err_other = 0.0;
    for (int kind = 0; kind < 5; ++kind) {
      for (int rep = 0; rep < 8; ++rep) {
        std::vector<float> w(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          float v = nd(rng);
          if (kind == 1 && (i / 32) % 3 == 0) v = 0.0f;                // zero sub-blocks
          if (kind == 2 && i == 77 + 256 * rep % 1024) v = -40.0f;     // one outlier
          if (kind == 3) v *= 1e-6f;                                    // fp16 subnormal scales
          if (kind == 4) v = std::fabs(v) * (rep % 2 ? 1.0f : -1.0f);   // one sign
          w[static_cast<size_t>(i)] = v;
        }
        const std::vector<float> deq = round_and_check_packing(g, w);
        if (kind == 0) {
          err += squared_error(w, deq);
          err_other += squared_error(w, round_and_check_packing(other, w));
        }
      }
    }
    std::printf("Gaussian rows: %s error %.4g, %d-bit %s %.4g (%.3f)\n", std::string(dtype_name(type)).c_str(), err,
                other_bits, std::string(dtype_name(other_type)).c_str(), err_other, err / err_other);
    EXPECT_LT(err, 0.9 * err_other);
  }
}

// The super-block grids' fit weighted by per-input importance (H_ii under
// AWQ and GPTQ): the importance-weighted error is below the unweighted
// fit's, summed over many super-blocks of Gaussian values with
// exponentially spread weights.
TEST(Quantize, ImportanceWeightedFitLowersWeightedError) {
  for (DType type : {DType::kQ4_K, DType::kQ3_K, DType::kQ5_K, DType::kQ6_K, DType::kQ2_K}) {
    const Grid g = make_grid(type, 0);
    std::mt19937 rng(23);
    std::normal_distribution<float> nd;
    std::exponential_distribution<float> ed(1.0f);
    const int64_t n = 256 * 32;
    std::vector<float> w(static_cast<size_t>(n)), imp(w.size());
    for (int64_t i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = nd(rng);
      imp[static_cast<size_t>(i)] = std::pow(ed(rng), 3.0f);
    }
    double err[2] = {0.0, 0.0};
    for (int weighted = 0; weighted < 2; ++weighted) {
      std::vector<int8_t> lv(static_cast<size_t>(n));
      std::vector<float> sc(static_cast<size_t>(n / g.block)), mn(sc.size()), deq(w.size());
      float* mins = g.affine ? mn.data() : nullptr;
      rtn_row(g, w.data(), n, {}, lv.data(), sc.data(), mins, weighted ? imp.data() : nullptr);
      dequant_row(g, lv.data(), sc.data(), n, deq.data(), mins);
      for (int64_t i = 0; i < n; ++i) {
        err[weighted] += imp[static_cast<size_t>(i)] * std::pow(w[static_cast<size_t>(i)] - deq[static_cast<size_t>(i)], 2);
      }
    }
    std::printf("%s importance-weighted error: plain fit %.4g, weighted fit %.4g (%.3f)\n", std::string(dtype_name(type)).c_str(), err[0],
                err[1], err[1] / err[0]);
    EXPECT_LT(err[1], 0.8 * err[0]) << dtype_name(type);
  }
}

// stories260K in Q4_K and Q3_K: every matrix padded to 256 columns (its
// rows are 64 and 172 wide; token_embd falls back to F16), the file is the
// in-memory quantization, and the loaded model's logits match the numpy
// reference reading the same file.
TEST(Quantize, Stories260KSuperBlockTypesRoundTripAndMatchNumpy) {
  const auto& m = testing::stories260k();
  ThreadPool pool(2);
  for (DType type : {DType::kQ4_K, DType::kQ3_K}) {
    SCOPED_TRACE(dtype_name(type));
    const std::string label = type == DType::kQ4_K ? "q4_k-padded" : "q3_k-padded";
    const std::string path = testing::temp_path("s260k_" + label + ".gguf");
    QuantizeOptions opt;
    opt.type = type;
    quantize_model(*m.lm.file, path, opt, nullptr, pool);
    const LoadedModel q = load_model(path);
    EXPECT_EQ(q.file->tensor("token_embd.weight").type, DType::kF16);
    EXPECT_EQ(q.file->tensor("blk.0.attn_q.weight").type, type);
    expect_file_is_in_memory_quantization(*m.lm.file, *q.file, type);
    testing::expect_logits_match_numpy(q, path, label, pool);
  }
}

TEST(Quantize, Q8_0AndKeepOverrides) {
  const auto& m = testing::stories260k();
  ThreadPool pool(1);
  const std::string path = testing::temp_path("s260k_q8_0.gguf");
  QuantizeOptions opt;
  opt.type = DType::kQ8_0;
  opt.keep = {{"token_embd.weight", DType::kF16}, {"blk.0.ffn_down.weight", DType::kF32}};
  quantize_model(*m.lm.file, path, opt, nullptr, pool);
  const LoadedModel q = load_model(path);
  EXPECT_EQ(q.file->tensor("token_embd.weight").type, DType::kF16);
  EXPECT_EQ(q.file->tensor("blk.0.ffn_down.weight").type, DType::kF32);
  EXPECT_EQ(q.file->tensor("blk.0.ffn_down.weight").ne[0], 172);  // float types are never padded
  EXPECT_FALSE(q.file->has(std::string(kPaddedColsKey) + "blk.0.ffn_down.weight"));
  EXPECT_EQ(q.file->tensor("blk.1.ffn_down.weight").type, DType::kQ8_0);
  EXPECT_EQ(q.file->tensor("blk.1.ffn_down.weight").ne[0], 192);
  EXPECT_EQ(q.file->tensor("blk.1.attn_q.weight").type, DType::kQ8_0);
  // Q8_0 of every other tensor: the greedy continuation of the golden
  // prompt stays that of the F32 model for a while.
  const std::vector<int32_t> tokens = m.tok->encode("Once upon a time", true);
  engine::SequenceRunner a(*m.lm.model, {.kv_type = DType::kF32}, pool), b(*q.model, {.kv_type = DType::kF32}, pool);
  std::vector<int32_t> ta = tokens, tb = tokens;
  std::span<const float> la = a.append(ta), lb = b.append(tb);
  for (int i = 0; i < 16; ++i) {
    const int32_t na = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
    const int32_t nb = static_cast<int32_t>(std::max_element(lb.begin(), lb.end()) - lb.begin());
    ASSERT_EQ(na, nb) << "step " << i;
    la = a.append(std::vector<int32_t>{na});
    lb = b.append(std::vector<int32_t>{nb});
  }
}

// The types written by round to nearest only (issue 35): each matrix is
// stored in the type (padded to whole blocks like the grid types), its
// rows are kernels::quantize_row of the original's, the model loads and
// its next-token logits are finite; GPTQ into them is refused.
TEST(Quantize, RtnIntoEveryOtherType) {
  const auto& m = testing::stories260k();
  ThreadPool pool(1);
  // (Q2_K is a grid type: quantize fits it like Q4_K, SuperBlockGridsPackWhatTheyRound.)
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4, DType::kIQ4_XS,
                  DType::kTQ1_0, DType::kTQ2_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::string path = testing::temp_path("s260k_other.gguf");
    QuantizeOptions opt;
    opt.type = t;
    quantize_model(*m.lm.file, path, opt, nullptr, pool);
    const LoadedModel q = load_model(path);
    const gguf::TensorInfo& wq = q.file->tensor("blk.0.attn_q.weight");
    ASSERT_EQ(wq.type, t);
    const gguf::TensorInfo& src = m.lm.file->tensor("blk.0.attn_q.weight");
    const int64_t cols = src.ne[0], cols_p = wq.ne[0];
    std::vector<float> row(static_cast<size_t>(cols_p), 0.0f);
    std::memcpy(row.data(), src.data, static_cast<size_t>(cols) * 4);  // stories260K is F32
    std::vector<uint8_t> want(row_bytes(t, cols_p));
    kernels::quantize_row(t, row.data(), want.data(), cols_p);
    EXPECT_EQ(0, std::memcmp(want.data(), wq.data, want.size()));
    engine::SequenceRunner r(*q.model, {.kv_type = DType::kF32}, pool);
    std::vector<int32_t> tokens = m.tok->encode("Once upon a time", true);
    for (float v : r.append(tokens)) ASSERT_TRUE(std::isfinite(v));
  }
  QuantizeOptions gptq;
  gptq.type = DType::kQ5_0;
  gptq.method = Method::kGptq;
  try {
    quantize_model(*m.lm.file, testing::temp_path("bad.gguf"), gptq, nullptr, pool);
    ADD_FAILURE() << "GPTQ into Q5_0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("written by rtn only"), std::string::npos) << e.what();
  }
}

TEST(Quantize, BadOptionsAndInputsAreErrors) {
  const auto& m = testing::stories260k();
  ThreadPool pool(1);
  const std::string out = testing::temp_path("bad.gguf");
  QuantizeOptions o;
  o.type = DType::kIQ2_XXS;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);  // no IQ2_XXS writer
  o.type = DType::kQ4_K;
  o.bits = 3;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);  // Q4_K holds 4-bit values
  o.type = DType::kQ3_K;
  o.bits = 4;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);  // Q3_K holds 3-bit values
  o.bits = 0;
  o.group = 32;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);  // Q3_K's blocks are 16
  o = {};
  o.group = 64;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);
  o = {};
  o.bits = 1;  // Q4_0 holds 4-, 3- or 2-bit values
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);
  o.bits = 5;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);
  o = {};
  o.experts_type = DType::kQ4_0;
  o.method = Method::kQmoeRtn;  // the experts are QMoE codes then
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);
  o = {};
  o.keep = {{"no_such.weight", DType::kQ8_0}};
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);
  o = {};
  o.method = Method::kGptq;
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, nullptr, pool), Error);  // no calibration
  EXPECT_THROW(parse_method("spinquant"), Error);
  {
    WholeCalibration cal(testing::stories260k_calibration());
    QuantizeOptions w;
    w.method = Method::kSmoothQuant;  // writes W8A8 only
    EXPECT_THROW(quantize_model(*m.lm.file, out, w, &cal, pool), Error);
    w.type = DType::kI8;
    w.method = Method::kGptq;  // W8A8 is rtn or smoothquant
    EXPECT_THROW(quantize_model(*m.lm.file, out, w, &cal, pool), Error);
    w.method = Method::kRtn;
    w.bits = 3;
    EXPECT_THROW(quantize_model(*m.lm.file, out, w, nullptr, pool), Error);
    w.bits = 4;  // W4A8: rtn or gptq
    w.method = Method::kSmoothQuant;
    EXPECT_THROW(quantize_model(*m.lm.file, out, w, &cal, pool), Error);
  }
  // Statistics that do not fit the tensor (another model's): refused.
  Calibration other;
  const float x[100] = {1.0f};
  other.at("ffn_act", 0).add(x, 1, 100, 100);
  other.finish();
  WholeCalibration other_stats(other);
  EXPECT_THROW(quantize_model(*m.lm.file, out, o, &other_stats, pool), Error);
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
  // A non-finite weight (the fuzzer's first find, tests/fuzz/quant_fuzz.cc):
  // an error naming the tensor, not undefined rounding.
  {
    std::string bytes = testing::read_file(testing::stories260k_path());
    const gguf::TensorInfo& t = m.lm.file->tensor("blk.2.attn_q.weight");
    ASSERT_EQ(t.type, DType::kF32);
    const float nan = std::nanf("");
    std::memcpy(bytes.data() + m.lm.file->data_offset() + t.offset + 4 * 70, &nan, 4);
    const std::string path = testing::temp_path("nan.gguf");
    testing::write_file(path, bytes);
    const gguf::File nf = gguf::File::open(path);
    try {
      quantize_model(nf, out, QuantizeOptions{}, nullptr, pool);
      ADD_FAILURE() << "a NaN weight was quantized";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blk.2.attn_q.weight"), std::string::npos) << e.what();
    }
  }
  // A padded file cannot be quantized again (its padding key would be stale).
  const std::string q = testing::temp_path("once.gguf");
  quantize_model(*m.lm.file, q, QuantizeOptions{}, nullptr, pool);
  const gguf::File qf = gguf::File::open(q);
  EXPECT_THROW(quantize_model(qf, out, QuantizeOptions{}, nullptr, pool), Error);
  // A padding key that disagrees with the model's width is refused at load.
  std::string bytes = testing::read_file(q);
  const std::string key = std::string(kPaddedColsKey) + "blk.0.ffn_down.weight";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  const size_t value = at + key.size() + 4;  // after the key, its u32 type tag
  uint32_t width = 0;
  std::memcpy(&width, bytes.data() + value, 4);
  ASSERT_EQ(width, 172u);
  for (const uint32_t w : {171u, 192u, 0u, 1000u}) {
    std::memcpy(bytes.data() + value, &w, 4);
    const std::string bad = testing::temp_path("badpad.gguf");
    testing::write_file(bad, bytes);
    EXPECT_THROW(load_model(bad), Error) << w;
  }
}

// Odd shapes through every method: FFN widths that are not multiples of 32
// (padded), GQA, biases, q/k norms, tied output, 3 and 4 bits. Each file
// loads and gives finite logits, and the calibration saw every linear.
TEST(Quantize, OddShapesThroughEveryMethod) {
  struct Case {
    const char* arch;
    int64_t embd, ff, heads, kv_heads;
    bool tied;
  };
  const Case cases[] = {{"llama", 64, 100, 4, 2, false}, {"qwen2", 96, 172, 6, 2, true}, {"qwen3", 64, 40, 4, 4, false}};
  ThreadPool pool(2);
  for (const Case& c : cases) {
    SyntheticModelSpec spec;
    spec.arch = c.arch;
    spec.n_embd = c.embd;
    spec.n_ff = c.ff;
    spec.n_head = c.heads;
    spec.n_head_kv = c.kv_heads;
    spec.tied_output = c.tied;
    spec.n_vocab = 300;
    spec.n_ctx = 256;
    const std::string src = testing::temp_path(std::string("odd_") + c.arch + ".gguf");
    write_synthetic_model(spec, src, 1);
    const LoadedModel lm = load_model(src);
    const auto tok = Tokenizer::from_gguf(*lm.file);
    const std::vector<int32_t> tokens = tok->encode(std::string(default_calibration_text()).substr(0, 3000), false);
    CalibrationOptions co;
    co.max_tokens = 512;
    const Calibration cal = calibrate(*lm.model, tokens, co, pool);
    EXPECT_NE(stats_for_tensor(cal, "blk.1.ffn_down.weight"), nullptr);
    EXPECT_EQ(stats_for_tensor(cal, "blk.1.ffn_down.weight")->dim, c.ff);
    for (const Method m : {Method::kRtn, Method::kAwq, Method::kGptq, Method::kAwqGptq}) {
      for (const int bits : {4, 3}) {
        QuantizeOptions o;
        o.method = m;
        o.bits = bits;
        o.gptq.act_order = bits == 3;
        const std::string out = testing::temp_path(fmt::format("odd_{}_{}_{}.gguf", c.arch, method_name(m), bits));
        WholeCalibration stats(cal);
        quantize_model(*lm.file, out, o, &stats, pool);
        const LoadedModel q = load_model(out);
        EXPECT_EQ(q.file->has(std::string(kPaddedColsKey) + "blk.0.ffn_down.weight"), c.ff % 32 != 0);
        engine::SequenceRunner runner(*q.model, {.kv_type = DType::kF32}, pool);
        const std::span<const float> logits = runner.append(std::vector<int32_t>{1, 5, 9, 200, 7}, true);
        for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << c.arch << " " << method_name(m) << " " << bits;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::quant
