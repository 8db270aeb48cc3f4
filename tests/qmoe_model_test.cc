// QMoE experts in a model (tessera quantize --method qmoe|qmoe-rtn): the
// file loads, its logits are those of the same model with the ternary
// experts written out as F32 (a different product: float rounding apart),
// experts grouped or run token by token give the same bits, Gaussian experts
// of a realistic width take under a bit per weight, and a QMOE tensor cut
// short or with bad codes is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "engine/sequence_runner.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "kernels/qmoe.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "quant/quantize_model.h"
#include "util/test_util.h"

namespace tessera::quant {
namespace {

std::string mixture(const std::string& name, int64_t ff_exp, int64_t n_embd = 64) {
  SyntheticModelSpec s = preset_spec("tiny");
  s.n_embd = n_embd;
  s.arch = "qwen3moe";
  s.n_vocab = 256;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = ff_exp;
  s.seed = 21;
  const std::string path = testing::temp_path(name + ".gguf");
  write_synthetic_model(s, path, 1);
  return path;
}

std::string qmoe_file(const std::string& base, const std::string& name, QuantizeResult* res = nullptr) {
  const gguf::File in = gguf::File::open(base);
  QuantizeOptions opt;
  opt.method = Method::kQmoeRtn;
  opt.type = DType::kF32;
  ThreadPool pool(2);
  const std::string out = testing::temp_path(name + ".gguf");
  const QuantizeResult r = quantize_model(in, out, opt, nullptr, pool);
  if (res != nullptr) *res = r;
  return out;
}

// The QMOE file with its experts written as F32 (their ternary values).
std::string f32_twin(const std::string& qmoe_path, const std::string& name) {
  const gguf::File in = gguf::File::open(qmoe_path);
  gguf::Writer w;
  for (const auto& [k, v] : in.metadata()) w.set_value(k, v);
  for (const gguf::TensorInfo& t : in.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.type != DType::kQMoE) {
      w.add_tensor(t.name, t.type, ne, [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
      continue;
    }
    w.add_tensor(t.name, DType::kF32, ne, [&t](uint8_t* out, size_t n) {
      const kernels::QmoeView v = kernels::parse_qmoe(t.data, t.n_bytes, t.ne[0], t.ne[1], t.ne[2], t.name.c_str());
      float* f = reinterpret_cast<float*>(out);
      ASSERT_EQ(n, static_cast<size_t>(t.n_elements()) * sizeof(float));
      for (int64_t m = 0; m < t.ne[2]; ++m) {
        for (int64_t r = 0; r < t.ne[1]; ++r) kernels::qmoe_dequantize_row(v, m, r, f + (m * t.ne[1] + r) * t.ne[0]);
      }
    });
  }
  const std::string out = testing::temp_path(name + ".gguf");
  w.write(out);
  return out;
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& toks) {
  ThreadPool pool(2);
  engine::SequenceRunner r(m, {.n_ctx = 128, .kv_type = DType::kF32}, pool);
  const auto all = r.append(toks, /*all_logits=*/true);
  return {all.begin(), all.end()};
}

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (i * 29) % 250);
  return t;
}

TEST(QmoeModel, LogitsAreThoseOfTheTernaryExpertsInF32) {
  const std::string q = qmoe_file(mixture("qmoe-base", 64), "qmoe-rtn");
  const LoadedModel lq = load_model(q);
  const LoadedModel lf = load_model(f32_twin(q, "qmoe-twin"));
  EXPECT_EQ(lq.file->tensor("blk.0.ffn_up_exps.weight").type, DType::kQMoE);
  const std::vector<int32_t> toks = tokens(40);
  const std::vector<float> a = logits(*lq.model, toks), b = logits(*lf.model, toks);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::abs(b[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs) << "max |QMoE - F32 twin| " << max_diff << " of logits up to " << max_abs;
  // A QMoE token reads fewer bytes than the F32 one.
  EXPECT_LT(lq.model->bytes_per_token(), lf.model->bytes_per_token());
}

TEST(QmoeModel, GroupedAndTokenByTokenExpertsGiveTheSameBits) {
  const std::string q = qmoe_file(mixture("qmoe-base2", 64), "qmoe-rtn2");
  const LoadedModel grouped = load_model(q);
  setenv("TESSERA_MOE_PER_TOKEN", "1", 1);
  const LoadedModel per_token = load_model(q);
  unsetenv("TESSERA_MOE_PER_TOKEN");
  const std::vector<int32_t> toks = tokens(24);
  EXPECT_EQ(logits(*grouped.model, toks), logits(*per_token.model, toks));
}

TEST(QmoeModel, GaussianExpertsOfRealisticWidthTakeUnderABitPerWeight) {
  // Rows of 512 and 1024: the extremes sit near 3 sigma, so ~87% of the
  // weights round to zero; headers, scales and offsets included.
  QuantizeResult r;
  qmoe_file(mixture("qmoe-wide", 1024, 512), "qmoe-wide-rtn", &r);
  EXPECT_GT(r.n_expert_weights, 0);
  EXPECT_LT(r.expert_bits_per_weight(), 1.0) << r.expert_bits_per_weight();
}

TEST(QmoeModel, CorruptQmoeTensorsAreRefusedByName) {
  const std::string q = qmoe_file(mixture("qmoe-base3", 64), "qmoe-rtn3");
  const gguf::File f = gguf::File::open(q);
  const gguf::TensorInfo& t = f.tensor("blk.1.ffn_down_exps.weight");
  std::ifstream in(q, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The down tensor's position in the file: find its header among the QMOE
  // headers by size (each header names its byte count).
  size_t pos = 0, found = std::string::npos;
  while ((pos = bytes.find("QMOE", pos)) != std::string::npos) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data() + pos + 8, 8);
    if (n == t.n_bytes && std::memcmp(bytes.data() + pos, t.data, 64) == 0) found = pos;
    pos += 4;
  }
  ASSERT_NE(found, std::string::npos);
  auto expect_refused = [&](const std::string& b, const std::string& label, const std::string& want) {
    const std::string path = testing::temp_path("qmoe-bad-" + label + ".gguf");
    std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
    try {
      load_model(path);
      ADD_FAILURE() << label << ": loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << label << ": " << e.what();
    }
  };
  std::string b = bytes;
  b[found + 32 + 8 * 3 + 4] = 0;  // dictionary entry 3: length 0
  expect_refused(b, "dict", "'blk.1.ffn_down_exps.weight'");
  b = bytes;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(b.data() + found + 8, &huge, 8);  // declares more bytes than the file has
  expect_refused(b, "size", "blk.1.ffn_down_exps.weight");
  expect_refused(bytes.substr(0, found + 100), "truncated", "blk.1.ffn_down_exps.weight");
}

// --experts-type: a mixture's experts in their own type, the rest in --type;
// the file loads and runs, its logits moved by the experts' rounding alone
// (changed, and by less than a tenth of the largest logit).
TEST(QmoeModel, ExpertsTypeQuantizesTheExpertsAlone) {
  const std::string base = mixture("experts-type-base", 64);
  const gguf::File in = gguf::File::open(base);
  QuantizeOptions opt;
  opt.method = Method::kRtn;
  opt.type = DType::kF16;
  opt.experts_type = DType::kQ4_0;
  ThreadPool pool(2);
  const std::string out = testing::temp_path("experts-type-q4.gguf");
  const QuantizeResult r = quantize_model(in, out, opt, nullptr, pool);
  EXPECT_NEAR(r.expert_bits_per_weight(), 4.5, 1e-9);
  const LoadedModel lm = load_model(out);
  EXPECT_EQ(lm.file->tensor("blk.0.ffn_gate_exps.weight").type, DType::kQ4_0);
  EXPECT_EQ(lm.file->tensor("blk.0.ffn_down_exps.weight").type, DType::kQ4_0);
  EXPECT_EQ(lm.file->tensor("blk.0.attn_q.weight").type, DType::kF16);
  const LoadedModel lb = load_model(base);
  const std::vector<int32_t> toks = tokens(16);
  const std::vector<float> a = logits(*lm.model, toks), b = logits(*lb.model, toks);
  double diff = 0.0, mag = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::abs(b[i])));
  }
  EXPECT_GT(diff, 0.0) << "the experts were not quantized";
  EXPECT_LT(diff, 0.1 * mag) << diff << " of " << mag;
}

}  // namespace
}  // namespace tessera::quant
