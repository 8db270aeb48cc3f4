// QuaRot's offline rotation of a model (Ashkboos et al. 2024, "QuaRot:
// Outlier-Free 4-Bit Inference in Rotated LLMs"; docs/QUANTIZATION.md):
// the same function, computed in a basis where activations have no outlier
// features, so that weights and activations quantize with less error.
//
//  1. Each RMSNorm's scale is folded into the matrices that read it (W
//     diag(g)); the norms become ones. RMSNorm(R x) = R RMSNorm(x) for an
//     orthogonal R, so the residual stream may then be rotated.
//  2. The residual stream is rotated by R (kernels/rotation.h, n_embd):
//     token embeddings R e, every reader of the stream W R^T (q, k, v,
//     gate, up, output), every writer R W (attn_output, ffn_down).
//  3. Inside attention, each value head is rotated by R_h (head_dim): V's
//     rows R_h W_v, attn_output's columns of every head W_o R_h^T
//     (attention is linear in V, so its output comes out rotated).
//  4. With `online_ffn`, ffn_down's input is rotated at run time by R_f
//     (n_ff; no weight can absorb it: the SwiGLU product is elementwise):
//     ffn_down becomes W_down R_f^T and the file says
//     `tessera.rotation.ffn_down` = R_f's seed (docs/FORMATS.md); without
//     it the file is a plain model llama.cpp computes the same way.
//
// Every rotated matrix is written in F32 (quantize it afterwards:
// `tessera quantize --method quarot` does both). Pre-norm architectures
// with RMSNorm only: llama, qwen2, qwen3, phi3, and the mixtures (mixtral,
// qwen2moe, qwen3moe, gpt-oss): the router, the experts' gate and up and the
// shared expert's gate vector read the stream (W R^T), the experts' down
// matrices and every output bias write it (R W, R b); a mixture gets no
// run-time rotation (`online_ffn` is ignored). Gemma 2/3: their post-norms
// (RMSNorm of the attention / FFN output, scaled, before the residual add)
// do not commute with R, so they stay, attn_output and ffn_down keep their
// output basis, and the file says `tessera.rotation.post_norm` = R's seed:
// the model rotates each post-norm's output by R at run time.
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace tessera::quant {

struct RotateOptions {
  uint64_t seed = 0x0a5b07;  // R's; R_h and R_f take seed + 1 and seed + 2
  bool online_ffn = true;
  bool heads = true;
};

void rotate_model(const gguf::File& in, const RotateOptions& opt, const std::string& out_path);

}  // namespace tessera::quant
