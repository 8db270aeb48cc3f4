// Fetching weights from a GGUF file by name with their shapes checked, so a
// model file that does not match its architecture fails at load with the
// tensor's name, expected and actual shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/qmoe.h"
#include "format/gguf.h"
#include "format/model_config.h"

namespace tessera {

// A QuaRot-rotated model (quant/rotate.h) whose ffn_down input is rotated at
// run time: the rotation's seed (kernels::make_rotation(n_ff, seed)).
inline constexpr const char* kFfnRotationKey = "tessera.rotation.ffn_down";
// Seed of the residual stream's rotation R = kernels::make_rotation(n_embd,
// seed), applied at run time to each post-norm's output (Gemma 2/3 rotated
// by quant/rotate.h: a scaled RMSNorm does not commute with R).
inline constexpr const char* kPostNormRotationKey = "tessera.rotation.post_norm";
// Each layer's key mean, which a quantized KV cache subtracts: n_layer * kv_dim floats
// (Model::key_mean, quant/key_mean.h).
inline constexpr const char* kKeyMeanKey = "tessera.kv.key_mean";
// Why this model's keys cannot be stored minus a constant (its attention
// scores are not shift-invariant): "soft-capping", "sinks"; nullptr when
// they can.
inline const char* key_shift_obstacle(const ModelConfig& c) {
  if (c.attn_softcap != 0.0f) return "soft-capping";
  return c.arch == "gpt-oss" ? "sinks" : nullptr;
}

// A W8A8 file whose codes are 4-bit (W4A8, -8..7): loaded as nibbles.
inline constexpr const char* kW4A8Key = "tessera.w4a8";

// A matrix of `rows` output features by `cols` inputs, in GGUF order
// (ne = [cols, rows]). Must be a type the matmul kernels handle.
kernels::WeightView load_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows);

// Rows [r0, r0 + n) / columns [c0, c0 + n) of a view: a view of the same
// bytes (columns: strided, row_bytes unchanged; c0 and n whole blocks).
kernels::WeightView matrix_rows(kernels::WeightView w, int64_t r0, int64_t n);
kernels::WeightView matrix_cols(kernels::WeightView w, int64_t c0, int64_t n);
// A tensor-parallel rank's part of matrix `name` (ne = [cols, rows]): rows
// [r0, r0 + n) or columns [c0, c0 + n). From a file mapped whole, views as
// above; from a file opened on demand (gguf::Mapping::kOnDemand) only the
// part's bytes are touched: the rows' pages mapped, the columns read into a
// copy of n columns (row_bytes of n) that the File keeps (File::drop frees
// it once a packed copy has replaced it: kernels::reads_packed_only).
kernels::WeightView load_matrix_rows(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t r0, int64_t n);
kernels::WeightView load_matrix_cols(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t c0, int64_t n);
// Tessera's any-shape storage (docs/QUANTIZATION.md): a matrix whose input
// width is not a multiple of its type's block is stored with zero columns
// appended up to the next whole block, and the metadata key
// kPaddedColsKey + name (u32) holds the true width. llama.cpp does not read
// such files. The view has cols = the stored width, x_cols = the true one.
inline constexpr const char* kPaddedColsKey = "tessera.padded_cols.";
kernels::WeightView load_padded_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows);

// The experts of a mixture, stored as llama.cpp stores them: one 3-D tensor
// ne = [cols, rows, n_expert], expert e's matrix at rows [e * rows, (e + 1) *
// rows) of it. Expert e's rows [r0, r0 + n) / columns [c0, c0 + n), as
// load_matrix_rows / load_matrix_cols take them (on demand: only their bytes).
kernels::WeightView load_expert_rows(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t n_expert, int64_t e, int64_t r0, int64_t n);
kernels::WeightView load_expert_cols(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                     int64_t n_expert, int64_t e, int64_t c0, int64_t n);
// The same three-dimensional tensor stored as QMoE's ternary codes
// (kernels/qmoe.h): its layout checked, every codeword included.
kernels::QmoeView load_qmoe_experts(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                    int64_t n_expert);

// A W8A8 matrix (tessera quantize --type w8a8; docs/FORMATS.md): tensor
// `name` of GGUF type I8, ne = [cols, rows], codes in -127..127, and
// w8a8_scale_name(name), F32 [rows], each output channel's scale (finite,
// >= 0), packed for the W8A8 kernels. Anything else is kCorruptFile.
std::string w8a8_scale_name(const std::string& name);  // "blk.0.attn_q.weight" -> "blk.0.attn_q.scale"
// bits 4 (the file has kW4A8Key): codes -8..7, packed as nibbles.
// `part`: a tensor-parallel rank's rows (with their scales) or columns (with
// every row's scale), only their bytes touched.
struct MatrixPart {
  int64_t r0 = 0, rows = 0;  // rows 0: all of them
  int64_t c0 = 0, cols = 0;  // cols 0: all of them
};
kernels::PreparedWeight load_w8a8_matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                                         int bits = 8, MatrixPart part = {});

// A vector of n values (norm weights, biases), converted to f32.
std::vector<float> load_vector(const gguf::File& f, const std::string& name, int64_t n);
// `count` vectors of n values stored as a 2-D tensor ne = [n, count] (a
// mixture's per-expert biases), converted to f32, vector i at [i * n, (i + 1) * n).
std::vector<float> load_vectors(const gguf::File& f, const std::string& name, int64_t n, int64_t count);

// Bytes of a matrix (for the roofline).
inline size_t matrix_bytes(const kernels::WeightView& w) {
  return w.row_bytes > 0 ? w.row_bytes * static_cast<size_t>(w.rows) : w.n_bytes;
}

}  // namespace tessera
