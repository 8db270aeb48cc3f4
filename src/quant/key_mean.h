// Key centering for a quantized KV cache (docs/KV_CACHE.md, "Key
// centering"): after RoPE, a model's keys carry a large constant part in the
// low-frequency rotary pairs, which turn by less than a radian over the
// context (stories260K: means of 13-19 against a spread of 1-4 in a head of
// 8). One 4-bit step per head is then set by that constant, and the rest of
// the key rounds away. Every key of a query is shifted by the same vector c,
// so q.(k - c) = q.k - q.c moves all of a query's scores by one constant and
// the softmax is unchanged: the cache stores k - c (SageAttention's
// smoothing of K, Zhang et al. 2024, with c calibrated once instead of
// taken per block). c is each layer's mean key over a calibration text,
// written into the file as `tessera.kv.key_mean` (docs/FORMATS.md);
// engines that do not know the key compute the same function without it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace tessera::quant {

// Each layer's mean key after RoPE over `tokens` ([n_layer][kv_dim]), run in
// chunks of n_ctx tokens from an empty cache (BOS first when bos >= 0).
std::vector<std::vector<float>> key_means(const Model& model, std::span<const int32_t> tokens, int64_t n_ctx, int32_t bos,
                                          ThreadPool& pool);

// The means as the file stores them: layer after layer.
std::vector<float> flatten_key_means(const std::vector<std::vector<float>>& means);

}  // namespace tessera::quant
