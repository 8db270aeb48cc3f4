// quant/key_mean.h: each layer's mean key over a calibration text.
#include "quant/key_mean.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sequence_runner.h"

namespace tessera::quant {

std::vector<std::vector<float>> key_means(const Model& model, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                                          ThreadPool& pool) {
  const ModelConfig& c = model.config();
  n_ctx = std::min(n_ctx, c.n_ctx_train);
  TESSERA_CHECK(n_ctx >= 2 && tokens.size() >= 2, kInvalidArgument,
                "key centering needs a calibration context and a text of at least 2 tokens");
  std::vector<std::vector<double>> sum(static_cast<size_t>(c.n_layer), std::vector<double>(static_cast<size_t>(c.kv_dim())));
  engine::SequenceRunner runner(model, {.n_ctx = n_ctx, .kv_type = DType::kF32, .max_batch_tokens = n_ctx}, pool);
  runner.state().tap = [&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols,
                           int64_t stride) {
    if (name != "k" || layer < 0 || layer >= c.n_layer) return;  // keys after RoPE, as the cache gets them
    std::vector<double>& s = sum[static_cast<size_t>(layer)];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) s[static_cast<size_t>(j)] += data[r * stride + j];
    }
  };
  const int64_t total = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> chunk;
  for (int64_t at = 0; at < total; at += n_ctx) {
    chunk.assign(tokens.begin() + at, tokens.begin() + std::min(total, at + n_ctx));
    if (bos >= 0) chunk[0] = bos;
    runner.reset();
    runner.append(chunk);
  }
  runner.state().tap = nullptr;
  std::vector<std::vector<float>> means;
  for (const std::vector<double>& s : sum) {
    std::vector<float>& m = means.emplace_back(s.size());
    for (size_t j = 0; j < s.size(); ++j) m[j] = static_cast<float>(s[j] / static_cast<double>(total));
  }
  return means;
}

std::vector<float> flatten_key_means(const std::vector<std::vector<float>>& means) {
  std::vector<float> all;
  for (const std::vector<float>& m : means) all.insert(all.end(), m.begin(), m.end());
  return all;
}

}  // namespace tessera::quant
