// GPTQ and AWQ (quant/gptq.h, quant/awq.h) on the real stories260K weights
// with statistics calibrated on the built-in text:
//  * GPTQ's levels and scales equal an independent numpy implementation
//    (tests/reference/quant_ref.py gptq: matrix form, no lazy batches,
//    numpy.linalg.inv), in storage order and act-order, for a square matrix
//    and the padded ffn_down;
//  * on every linear, GPTQ's and AWQ's output error over the calibration
//    tokens is below plain rounding's;
//  * end to end, on the evaluation text (which calibration never sees), the
//    KL divergence of GPTQ and AWQ Q4_0 models from F32 is below RTN's;
//  * odd inputs (dead channels, a zero Hessian, a tiny matrix) give finite,
//    in-range results or a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/kl_divergence.h"
#include "kernels/quant.h"
#include "quant/awq.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"

namespace tessera::quant {
namespace {

// A stories260K matrix in f32, padded with zero columns to cols_p.
std::vector<float> matrix(const std::string& name, int64_t* rows, int64_t* cols, int64_t cols_p = 0) {
  const gguf::TensorInfo& t = testing::stories260k().lm.file->tensor(name);
  *rows = t.ne[1];
  const int64_t c = t.ne[0];
  *cols = cols_p ? cols_p : c;
  std::vector<float> w(static_cast<size_t>(*rows * *cols), 0.0f);
  for (int64_t r = 0; r < *rows; ++r) {
    kernels::dequantize_row(t.type, t.data + r * row_bytes(t.type, c), w.data() + r * *cols, c);
  }
  return w;
}

std::vector<double> padded_h(const InputStats& s, int64_t n) {
  std::vector<double> h(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < s.dim; ++i) std::copy_n(s.h.data() + i * s.dim, s.dim, h.data() + i * n);
  return h;
}

// Every linear of every stories260K layer with its input's H, inputs
// padded with dead (zero) channels to a multiple of `unit`.
struct Linear {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::vector<float> w;
  std::vector<double> h;
};

std::vector<Linear> stories_linears(const Calibration& cal, int64_t unit) {
  std::vector<Linear> out;
  for (int il = 0; il < 5; ++il) {
    for (const char* kind : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      Linear l;
      l.name = fmt::format("blk.{}.{}.weight", il, kind);
      const InputStats* st = stats_for_tensor(cal, l.name);
      EXPECT_NE(st, nullptr) << l.name;
      if (st == nullptr) continue;
      const int64_t cols_p = (st->dim + unit - 1) / unit * unit;
      l.w = matrix(l.name, &l.rows, &l.cols, cols_p);
      l.h = padded_h(*st, cols_p);
      out.push_back(std::move(l));
    }
  }
  return out;
}

template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void expect_gptq_matches_numpy(const std::string& name, bool act_order, int scale_steps = GptqOptions{}.scale_steps) {
  const InputStats* st = stats_for_tensor(testing::stories260k_calibration(), name);
  ASSERT_NE(st, nullptr) << name;
  int64_t rows = 0, cols = 0;
  const int64_t cols_p = (st->dim + 31) / 32 * 32;
  const std::vector<float> w = matrix(name, &rows, &cols, cols_p);
  const std::vector<double> h = padded_h(*st, cols_p);
  const Grid g = make_grid(DType::kQ4_0, 0);
  GptqOptions o;
  o.act_order = act_order;
  o.scale_steps = scale_steps;
  o.batch = 64;  // several lazy batches even for 64 columns... of 192
  std::vector<int8_t> lv(w.size());
  std::vector<float> sc(w.size() / 32);
  ThreadPool pool(2);
  gptq(g, w.data(), rows, cols, h, o, lv.data(), sc.data(), &pool);

  std::string in;
  for (int64_t v : {rows, cols, int64_t{32}, int64_t{g.qmin}, int64_t{g.qmax}, int64_t{1}, int64_t{act_order},
                    int64_t{o.scale_steps}}) {
    put(in, v);
  }
  put(in, o.damp);
  in.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  in.append(reinterpret_cast<const char*>(h.data()), h.size() * 8);
  const std::string src = testing::temp_path("gptq_in"), dst = testing::temp_path("gptq_out");
  testing::write_file(src, in);
  const std::string cmd =
      std::string("/usr/bin/python3 ") + TESSERA_SOURCE_DIR + "/tests/reference/quant_ref.py gptq " + src + " " + dst;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string out = testing::read_file(dst);
  ASSERT_EQ(out.size(), lv.size() + sc.size() * 4);
  int64_t level_diff = 0;
  for (size_t i = 0; i < lv.size(); ++i) level_diff += static_cast<int8_t>(out[i]) != lv[i];
  EXPECT_EQ(level_diff, 0) << name << (act_order ? " act-order" : "");
  EXPECT_EQ(0, std::memcmp(out.data() + lv.size(), sc.data(), sc.size() * 4)) << name;
}

// GPTQ on the super-block grids (each super-block's scales, and Q4_K's
// mins, fitted to its current values when its first column is reached)
// against the grid's own rounding, on every linear (inputs padded to 256
// with dead channels), in storage order and act-order: Q4_K's affine blocks
// of 32 and Q3_K's symmetric blocks of 16.
void expect_super_gptq_beats_rounding(DType type) {
  const Calibration& cal = testing::stories260k_calibration();
  const Grid g = make_grid(type, 0);
  ThreadPool pool(2);
  const std::vector<Linear> linears = stories_linears(cal, 256);
  for (bool act_order : {false, true}) {
    double total_rtn = 0, total_gptq = 0;
    for (const Linear& lin : linears) {
      const std::string& name = lin.name;
      const int64_t rows = lin.rows, cols = lin.cols, nb = cols / g.block;
      const std::vector<float>& w = lin.w;
      const std::vector<double>& h = lin.h;
      std::vector<int8_t> lv(w.size());
      std::vector<float> sc(w.size() / static_cast<size_t>(g.block)), mn(g.affine ? sc.size() : 0), deq(w.size());
      const auto mins = [&](int64_t r) { return g.affine ? mn.data() + r * nb : nullptr; };
      for (int64_t r = 0; r < rows; ++r) {
        rtn_row(g, w.data() + r * cols, cols, {}, lv.data() + r * cols, sc.data() + r * nb, mins(r));
        dequant_row(g, lv.data() + r * cols, sc.data() + r * nb, cols, deq.data() + r * cols, mins(r));
      }
      const double rtn = output_error(w.data(), deq.data(), rows, cols, h);
      GptqOptions o;
      o.act_order = act_order;
      gptq(g, w.data(), rows, cols, h, o, lv.data(), sc.data(), &pool, mins(0));
      for (int8_t q : lv) ASSERT_TRUE(q >= g.qmin && q <= g.qmax);
      for (int64_t r = 0; r < rows; ++r) {
        dequant_row(g, lv.data() + r * cols, sc.data() + r * nb, cols, deq.data() + r * cols, mins(r));
      }
      const double gq = output_error(w.data(), deq.data(), rows, cols, h);
      EXPECT_LT(gq, rtn) << name << (act_order ? " act-order" : "");
      total_rtn += rtn;
      total_gptq += gq;
    }
    std::printf("%s output error, %s: rtn %.4g gptq %.4g (%.3f)\n", std::string(dtype_name(type)).c_str(),
                act_order ? "act-order" : "storage order", total_rtn, total_gptq, total_gptq / total_rtn);
    EXPECT_LT(total_gptq, 0.8 * total_rtn);
  }
}

TEST(Gptq, OnQ4_KBeatsRoundingOnEveryLinear) { expect_super_gptq_beats_rounding(DType::kQ4_K); }
TEST(Gptq, OnQ3_KBeatsRoundingOnEveryLinear) { expect_super_gptq_beats_rounding(DType::kQ3_K); }

TEST(Gptq, MatchesNumpyInStorageOrder) {
  expect_gptq_matches_numpy("blk.1.attn_q.weight", false);
  expect_gptq_matches_numpy("blk.2.ffn_down.weight", false);  // 172 inputs, padded to 192
  expect_gptq_matches_numpy("blk.2.ffn_down.weight", false, 0);  // each block's own scale
}

TEST(Gptq, MatchesNumpyInActOrder) {
  expect_gptq_matches_numpy("blk.1.attn_q.weight", true);
  expect_gptq_matches_numpy("blk.2.ffn_down.weight", true);
}

// Output error of RTN, GPTQ and AWQ (scale search, then clipping search) on
// every linear of every layer.
TEST(Gptq, AndAwqBeatRoundingOnEveryLinear) {
  const Calibration& cal = testing::stories260k_calibration();
  const Grid g = make_grid(DType::kQ4_0, 0);
  ThreadPool pool(2);
  double total_rtn = 0, total_gptq = 0;
  for (const Linear& lin : stories_linears(cal, 32)) {
    const std::string& name = lin.name;
    const int64_t rows = lin.rows, cols = lin.cols;
    const std::vector<float>& w = lin.w;
    const std::vector<double>& h = lin.h;
    std::vector<int8_t> lv(w.size());
    std::vector<float> sc(w.size() / 32), deq(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      rtn_row(g, w.data() + r * cols, cols, {}, lv.data() + r * cols, sc.data() + r * cols / 32);
      dequant_row(g, lv.data() + r * cols, sc.data() + r * cols / 32, cols, deq.data() + r * cols);
    }
    const double rtn = output_error(w.data(), deq.data(), rows, cols, h);
    gptq(g, w.data(), rows, cols, h, GptqOptions{}, lv.data(), sc.data(), &pool);
    for (int64_t r = 0; r < rows; ++r) dequant_row(g, lv.data() + r * cols, sc.data() + r * cols / 32, cols, deq.data() + r * cols);
    const double gq = output_error(w.data(), deq.data(), rows, cols, h);
    EXPECT_LT(gq, rtn) << name;
    total_rtn += rtn;
    total_gptq += gq;
    // AWQ's clipping search alone (per block against H's diagonal block).
    const std::vector<float> clip = awq_search_clip(g, w.data(), rows, cols, h, AwqOptions{});
    for (int64_t r = 0; r < rows; ++r) {
      rtn_row(g, w.data() + r * cols, cols, std::span<const float>(clip).subspan(static_cast<size_t>(r * cols / 32), static_cast<size_t>(cols / 32)),
              lv.data() + r * cols, sc.data() + r * cols / 32);
      dequant_row(g, lv.data() + r * cols, sc.data() + r * cols / 32, cols, deq.data() + r * cols);
    }
    EXPECT_LT(output_error(w.data(), deq.data(), rows, cols, h), rtn) << name << " clip";
  }
  EXPECT_LT(total_gptq, 0.8 * total_rtn);
}

TEST(Awq, ScaleSearchBeatsRoundingOnEveryGroup) {
  const Calibration& cal = testing::stories260k_calibration();
  const Grid g = make_grid(DType::kQ4_0, 0);
  double total = 0, total_rtn = 0;
  for (int il = 0; il < 5; ++il) {
    for (const auto& [tap, names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"attn_norm", {"attn_q", "attn_k", "attn_v"}}, {"ffn_norm", {"ffn_gate", "ffn_up"}}, {"ffn_act", {"ffn_down"}}}) {
      const InputStats* st = cal.find(tap, il);
      ASSERT_NE(st, nullptr);
      const int64_t cols_p = (st->dim + 31) / 32 * 32;
      InputStats sp = *st;
      sp.dim = cols_p;
      sp.h = padded_h(*st, cols_p);
      sp.abs_sum.resize(static_cast<size_t>(cols_p), 0.0);
      std::vector<std::vector<float>> ws;
      std::vector<LinearRef> refs;
      for (const std::string& n : names) {
        int64_t rows = 0, cols = 0;
        ws.push_back(matrix(fmt::format("blk.{}.{}.weight", il, n), &rows, &cols, cols_p));
        refs.push_back({ws.back().data(), rows});
      }
      const AwqScale s = awq_search_scale(g, refs, cols_p, sp, AwqOptions{});
      EXPECT_LT(s.error, s.rtn_error) << tap << " " << il;  // some alpha > 0 helps every group
      EXPECT_GT(s.alpha, 0.0f);
      total += s.error;
      total_rtn += s.rtn_error;
      for (float v : s.s) EXPECT_TRUE(std::isfinite(v) && v > 0.0f);
    }
  }
  EXPECT_LT(total, 0.9 * total_rtn);
}

// The first 100 000 bytes of the evaluation text, 40 chunks of 128.
struct Eval {
  std::vector<int32_t> tokens;
  engine::PerplexityOptions opt;
};
const Eval& eval_text() {
  static const Eval e = [] {
    Eval e;
    const std::string text = testing::read_file(testing::shared_path("data/tinystories_val_prefix.txt")).substr(0, 100000);
    e.tokens = testing::stories260k().tok->encode(text, true);
    e.opt.n_ctx = 128;
    e.opt.max_chunks = 40;
    e.opt.kv_type = DType::kF32;
    return e;
  }();
  return e;
}

TEST(Quantize, GptqAndAwqModelsDivergeLessThanRtn) {
  TESSERA_REQUIRE_SHARED("data/tinystories_val_prefix.txt");
  const auto& m = testing::stories260k();
  const Eval& e = eval_text();
  ThreadPool pool(2);
  const std::string base = testing::temp_path("s260k.klbase");
  engine::save_kl_base(*m.lm.model, *m.tok, e.tokens, e.opt, pool, base);
  double kl[4];
  const Method methods[4] = {Method::kRtn, Method::kGptq, Method::kAwq, Method::kAwqGptq};
  for (int i = 0; i < 4; ++i) {
    QuantizeOptions o;
    o.type = DType::kQ4_0;
    o.method = methods[i];
    const std::string path = testing::temp_path(std::string("s260k_") + method_name(methods[i]) + ".gguf");
    WholeCalibration stats(testing::stories260k_calibration());
    quantize_model(*m.lm.file, path, o, &stats, pool);
    const LoadedModel q = load_model(path);
    kl[i] = engine::kl_divergence(*q.model, *m.tok, e.tokens, e.opt, pool, base).kld_mean;
  }
  EXPECT_LT(kl[1], kl[0]) << "gptq " << kl[1] << " rtn " << kl[0];
  EXPECT_LT(kl[2], kl[0]) << "awq " << kl[2] << " rtn " << kl[0];
  EXPECT_LT(kl[3], kl[0]) << "awq+gptq " << kl[3] << " rtn " << kl[0];
  std::printf("KL over 40 chunks: rtn %.4f gptq %.4f awq %.4f awq+gptq %.4f\n", kl[0], kl[1], kl[2], kl[3]);
}

TEST(Gptq, OddInputsStayFiniteOrFailClearly) {
  const Grid g = make_grid(DType::kQ4_0, 3);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const int64_t cols : {32, 64, 96}) {
    for (const int64_t rows : {1, 3}) {
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (float& v : w) v = nd(rng);
      // Rank-deficient H with dead channels: x only ever uses the first half.
      std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
      for (int t = 0; t < 3; ++t) {
        std::vector<double> x(static_cast<size_t>(cols), 0.0);
        for (int64_t i = 0; i < cols / 2; ++i) x[static_cast<size_t>(i)] = nd(rng);
        for (int64_t i = 0; i < cols; ++i) {
          for (int64_t j = 0; j < cols; ++j) h[static_cast<size_t>(i * cols + j)] += x[static_cast<size_t>(i)] * x[static_cast<size_t>(j)];
        }
      }
      for (bool act : {false, true}) {
        std::vector<int8_t> lv(w.size());
        std::vector<float> sc(w.size() / 32);
        GptqOptions o;
        o.act_order = act;
        gptq(g, w.data(), rows, cols, h, o, lv.data(), sc.data(), nullptr);
        for (int8_t q : lv) EXPECT_TRUE(q >= -4 && q <= 3);
        for (float s : sc) EXPECT_TRUE(std::isfinite(s));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = cols / 2; i < cols; ++i) EXPECT_EQ(lv[static_cast<size_t>(r * cols + i)], 0);  // dead inputs
        }
      }
      std::vector<double> zero(h.size(), 0.0);  // nothing seen at all: every input dead
      std::vector<int8_t> lv(w.size());
      std::vector<float> sc(w.size() / 32);
      gptq(g, w.data(), rows, cols, zero, GptqOptions{}, lv.data(), sc.data(), nullptr);
      for (int8_t q : lv) EXPECT_EQ(q, 0);
    }
  }
  std::vector<float> w(40);
  std::vector<int8_t> lv(40);
  std::vector<float> sc(2);
  std::vector<double> h(40 * 40, 0.0);
  EXPECT_THROW(gptq(g, w.data(), 1, 40, h, GptqOptions{}, lv.data(), sc.data(), nullptr), Error);  // not whole blocks
  std::vector<double> small(10, 0.0);
  EXPECT_THROW(gptq(g, w.data(), 1, 32, small, GptqOptions{}, lv.data(), sc.data(), nullptr), Error);  // H of the wrong size
  std::vector<double> neg(32 * 32, 0.0);
  for (int i = 0; i < 32; ++i) neg[static_cast<size_t>(i * 33)] = i == 0 ? -100.0 : 1.0;  // not positive semidefinite
  EXPECT_THROW(gptq(g, w.data(), 1, 32, neg, GptqOptions{}, lv.data(), sc.data(), nullptr), Error);
}

}  // namespace
}  // namespace tessera::quant

namespace tessera::quant {
namespace {

// Calibrating a window of layers at a time (bounded memory) gives the same
// statistics as one pass over all of them, so the same file, byte for byte,
// whether each window runs from the embeddings or resumes the residual
// stream the previous one left; quantizing in file order runs each window
// once, and the output's statistics once, and with the stream each layer
// runs once after the output's pass.
void expect_windows_give_the_file_of_one_pass(bool resume) {
  const auto& m = testing::stories260k();
  ThreadPool pool(2);
  const std::vector<int32_t> tokens = m.tok->encode(std::string(default_calibration_text()), false);
  CalibrationOptions co;
  co.bos = m.tok->bos_id();
  co.max_tokens = 2048;
  const Calibration whole = calibrate(*m.lm.model, tokens, co, pool);
  const int64_t n_layer = m.lm.model->config().n_layer;
  ASSERT_EQ(n_layer, 5);
  std::vector<std::pair<int64_t, int64_t>> windows, ran;  // asked for; layers run
  ResidualStream stream;
  const LayerWindows::Run run = [&](int64_t b, int64_t e, bool result_norm) {
    windows.emplace_back(result_norm ? -1 : b, e);
    CalibrationOptions o = co;
    o.layer_begin = b;
    o.layer_end = e;
    o.result_norm = result_norm;
    o.resume = resume ? &stream : nullptr;
    Calibration c = calibrate(*m.lm.model, tokens, o, pool);
    ran.emplace_back(c.first_layer, c.end_layer);
    return c;
  };
  const std::vector<int64_t> dims = {64, 64, 64, 172};  // attn_norm, attn_out, ffn_norm, ffn_act
  const size_t layer_bytes = input_stats_bytes(dims);
  EXPECT_EQ(layer_bytes, (3 * 64 * 65 + 172 * 173) * sizeof(double));
  for (const Method method : {Method::kGptq, Method::kAwqGptq}) {
    windows.clear();
    LayerWindows win(run, n_layer, layer_bytes, 2 * layer_bytes + layer_bytes / 2);  // two layers per window
    EXPECT_EQ(win.layers_per_window(), 2);
    // The statistics themselves, for a layer in the last (short) window.
    const InputStats* s4 = win.find("ffn_act", 4);
    ASSERT_NE(s4, nullptr);
    EXPECT_EQ(s4->h, whole.find("ffn_act", 4)->h);
    const InputStats* s1 = win.find("attn_norm", 1);  // another window: [0, 2)
    ASSERT_NE(s1, nullptr);
    EXPECT_EQ(s1->h, whole.find("attn_norm", 1)->h);
    EXPECT_EQ(s1->abs_sum, whole.find("attn_norm", 1)->abs_sum);
    EXPECT_EQ(win.find("ffn_act", 4)->h, whole.find("ffn_act", 4)->h);
    EXPECT_EQ(win.passes(), 3);  // [4, 5), [0, 2), [4, 5) again
    windows.clear();

    QuantizeOptions o;
    o.method = method;
    const std::string a = testing::temp_path(std::string("win_whole_") + method_name(method) + ".gguf");
    const std::string b = testing::temp_path(std::string("win_windows_") + method_name(method) + ".gguf");
    WholeCalibration all(whole);
    quantize_model(*m.lm.file, a, o, &all, pool);
    quantize_model(*m.lm.file, b, o, &win, pool);
    EXPECT_EQ(testing::read_file(a), testing::read_file(b)) << method_name(method);
    // output.weight comes before the layers in this file: its pass, then
    // windows [0, 2), [2, 4), [4, 5).
    const std::vector<std::pair<int64_t, int64_t>> want = {{-1, 0}, {0, 2}, {2, 4}, {4, 5}};
    EXPECT_EQ(windows, want) << method_name(method);
    // Layers run: from the embeddings, all 5 for the output's pass and up to
    // each window's end after it; resuming, none for the output's pass (the
    // stream the window [4, 5) above left is the final one), then each
    // window's own layers.
    const std::vector<std::pair<int64_t, int64_t>> want_ran =
        resume ? std::vector<std::pair<int64_t, int64_t>>{{5, 5}, {0, 2}, {2, 4}, {4, 5}}
               : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {0, 2}, {0, 4}, {0, 5}};
    EXPECT_EQ(std::vector(ran.end() - 4, ran.end()), want_ran) << method_name(method);
  }
}

TEST(Quantize, LayerWindowsGiveTheFileOfOnePass) {
  for (const bool resume : {false, true}) {
    SCOPED_TRACE(resume ? "resuming" : "from the embeddings");
    expect_windows_give_the_file_of_one_pass(resume);
  }
}

}  // namespace
}  // namespace tessera::quant
