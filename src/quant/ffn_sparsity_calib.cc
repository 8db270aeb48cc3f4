#include "quant/ffn_sparsity_calib.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/sequence_runner.h"

namespace tessera::quant {
namespace {

constexpr int kBinsPerOctave = 64;
constexpr int kMinLog2 = -40, kMaxLog2 = 24;
constexpr int kBins = (kMaxLog2 - kMinLog2) * kBinsPerOctave + 2;  // + zero (or below) and above

int bin_of(float v) {
  const float a = std::fabs(v);
  if (!(a > 0.0f)) return 0;
  const double b = (std::log2(static_cast<double>(a)) - kMinLog2) * kBinsPerOctave;
  if (b < 0) return 0;
  return std::min(kBins - 1, 1 + static_cast<int>(b));
}

// The upper edge of bin b (its values are below it).
float bin_top(int b) { return b == 0 ? 0.0f : static_cast<float>(std::exp2(kMinLog2 + static_cast<double>(b) / kBinsPerOctave)); }

// Runs the model over the chunks of tokens with `tap` installed.
void run_chunks(const Model& model, std::span<const int32_t> tokens, const CalibrationOptions& opt, ThreadPool& pool,
                const ForwardTap& tap, const std::function<void(int64_t)>& done) {
  const int64_t n_ctx = std::min(opt.n_ctx, model.config().n_ctx_train);
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(tokens.size()), opt.max_tokens);
  engine::SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = DType::kF32, .max_batch_tokens = n_ctx}, pool);
  runner.state().tap = tap;
  std::vector<int32_t> chunk;
  for (int64_t at = 0; at < total; at += n_ctx) {
    const int64_t n = std::min(n_ctx, total - at);
    chunk.assign(tokens.begin() + at, tokens.begin() + at + n);
    if (opt.bos >= 0) chunk[0] = opt.bos;
    runner.reset();
    runner.append(chunk, /*all_logits=*/false, {}, {});
    done(at + n);
  }
  runner.state().tap = nullptr;
}

}  // namespace

FfnSparsityCalibration calibrate_ffn_sparsity(const Model& model, std::span<const int32_t> tokens, double sparsity,
                                              const CalibrationOptions& opt, ThreadPool& pool,
                                              const std::function<void(int64_t, int64_t)>& progress) {
  TESSERA_CHECK(sparsity > 0.0 && sparsity < 1.0, kInvalidArgument, "--ffn-sparsity {} is not in (0, 1)", sparsity);
  const ModelConfig& c = model.config();
  TESSERA_CHECK(!c.moe(), kInvalidArgument, "--ffn-sparsity: {} is a mixture of experts (dense FFNs only)", c.arch);
  const int64_t L = c.n_layer;
  const int64_t total = std::min<int64_t>(static_cast<int64_t>(tokens.size()), opt.max_tokens);
  TESSERA_CHECK(total >= 2, kInvalidArgument, "the calibration text has {} tokens; it needs at least 2", total);
  const auto report = [&](int pass) {
    return [&, pass](int64_t done) { if (progress) progress(pass * total + done, 2 * total); };
  };
  // Pass 1: the histograms.
  std::vector<std::vector<int64_t>> hist(static_cast<size_t>(L), std::vector<int64_t>(kBins, 0));
  bool seen = false;
  run_chunks(model, tokens, opt, pool, [&](std::string_view name, int64_t layer, const float* data, int64_t rows,
                                           int64_t cols, int64_t stride) {
    if (name != "ffn_gate_act" || layer < 0 || layer >= L) return;
    seen = true;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < cols; ++i) ++hist[static_cast<size_t>(layer)][bin_of(data[r * stride + i])];
    }
  }, report(0));
  TESSERA_CHECK(seen, kInvalidArgument, "--ffn-sparsity: {} has no gated FFN whose activation can be thresholded",
                c.arch);
  FfnSparsityCalibration out;
  out.sparsity = sparsity;
  for (int64_t il = 0; il < L; ++il) {
    const std::vector<int64_t>& h = hist[static_cast<size_t>(il)];
    int64_t n = 0;
    for (const int64_t v : h) n += v;
    const double want = sparsity * static_cast<double>(n);
    int64_t cum = 0;
    int b = 0;
    for (; b < kBins - 1; ++b) {
      cum += h[b];
      if (static_cast<double>(cum) >= want) break;
    }
    out.threshold.push_back(bin_top(b));
  }
  // Pass 2: the recall (and the fraction actually skipped) of the thresholds.
  std::vector<double> recall(static_cast<size_t>(L), 0.0), skipped(static_cast<size_t>(L), 0.0);
  std::vector<int64_t> counted(static_cast<size_t>(L), 0);
  std::vector<float> act, mag;
  run_chunks(model, tokens, opt, pool, [&](std::string_view name, int64_t layer, const float* data, int64_t rows,
                                           int64_t cols, int64_t stride) {
    if (layer < 0 || layer >= L) return;
    if (name == "ffn_gate_act") {
      act.resize(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) std::copy_n(data + r * stride, cols, act.data() + r * cols);
      return;
    }
    if (name != "ffn_act" || act.size() != static_cast<size_t>(rows * cols)) return;
    const float thr = out.threshold[static_cast<size_t>(layer)];
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = act.data() + r * cols;
      const float* hrow = data + r * stride;
      int64_t k = 0;
      for (int64_t i = 0; i < cols; ++i) k += std::fabs(a[i]) > thr;
      skipped[static_cast<size_t>(layer)] += 1.0 - static_cast<double>(k) / static_cast<double>(cols);
      ++counted[static_cast<size_t>(layer)];
      if (k == 0) {
        recall[static_cast<size_t>(layer)] += 1.0;
        continue;
      }
      mag.resize(static_cast<size_t>(cols));
      for (int64_t i = 0; i < cols; ++i) mag[static_cast<size_t>(i)] = std::fabs(hrow[i]);
      std::nth_element(mag.begin(), mag.begin() + (k - 1), mag.end(), std::greater<float>());
      const float kth = mag[static_cast<size_t>(k - 1)];  // the k-th largest |h|
      int64_t hit = 0;
      for (int64_t i = 0; i < cols; ++i) hit += std::fabs(a[i]) > thr && std::fabs(hrow[i]) >= kth;
      recall[static_cast<size_t>(layer)] += static_cast<double>(std::min(hit, k)) / static_cast<double>(k);
    }
    act.clear();
  }, report(1));
  for (int64_t il = 0; il < L; ++il) {
    const double n = std::max<int64_t>(1, counted[static_cast<size_t>(il)]);
    out.recall.push_back(static_cast<float>(recall[static_cast<size_t>(il)] / n));
    out.skipped.push_back(static_cast<float>(skipped[static_cast<size_t>(il)] / n));
  }
  return out;
}

}  // namespace tessera::quant
