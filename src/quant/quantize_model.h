// `tessera quantize`: a GGUF model in, the same model with its matrices in
// another storage type out, the values chosen by a method:
//   rtn       round each block to nearest (no calibration)
//   awq       AWQ scales (quant/awq.h) folded into the norms / ffn_up, then
//             rounding with AWQ's clipping search
//   gptq      GPTQ (quant/gptq.h) per matrix
//   awq+gptq  AWQ's scales, then GPTQ on the scaled matrices
//   qmoe      a mixture's experts as QMoE ternary codes (quant/qmoe.h), each
//             expert by GPTQ against the rows routed to it; the other
//             matrices rounded to nearest in --type
//   qmoe-rtn  the same with the experts rounded to nearest (no calibration)
// With QuantizeOptions::prune, the blocks' linears are pruned (magnitude or
// Wanda, quant/prune.h) before rounding; SP_Q8_0 / SP_Q4_0 store only their
// kept weights (kernels/sparse.h).
// A mixture's experts (blk.N.ffn_*_exps, [cols, rows, experts]) are
// matrices of rows x experts rows for every method.
// Matrices without calibration statistics (token_embd) are rounded to
// nearest. Any shape: a matrix whose input width is not a multiple of the
// block (stories260K's ffn_down, 172) is stored padded with zero columns to
// the next block and a tessera.padded_cols.<name> key (model/weights.h);
// token_embd is never padded (it falls back to F16 instead). Tensors are
// streamed to the output one at a time: peak memory is the input mapping
// plus one tensor in f32 and the statistics of the window of layers it
// belongs to.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "quant/awq.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/prune.h"

namespace tessera::quant {

enum class Method { kRtn, kAwq, kGptq, kAwqGptq, kQmoe, kQmoeRtn, kSmoothQuant };
Method parse_method(const std::string& s);  // "rtn", "awq", "gptq", "awq+gptq", "qmoe", "qmoe-rtn", "smoothquant"
const char* method_name(Method m);
inline bool needs_calibration(Method m) { return m != Method::kRtn && m != Method::kQmoeRtn; }
inline bool is_qmoe(Method m) { return m == Method::kQmoe || m == Method::kQmoeRtn; }

struct QuantizeOptions {
  DType type = DType::kQ4_0;  // of every matrix not in `keep`
  std::optional<DType> experts_type;  // a mixture's experts' instead (not with the qmoe methods)
  int bits = 0;               // 0: the type's own; 3: 3-bit values in Q4_0 blocks
  Method method = Method::kRtn;
  int64_t group = 0;          // 0: the type's block; anything else must equal it
  std::vector<std::pair<std::string, DType>> keep;  // tensor name -> its type
  // SmoothQuant (--method smoothquant, type W8A8): each input channel j of
  // the linears reading a norm (q/k/v, gate/up) or ffn_up's product
  // (down) is scaled by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), the
  // norm (or ffn_up's rows) divided by it.
  float smooth_alpha = 0.5f;
  GptqOptions gptq;
  AwqOptions awq;
  // Prune the blocks' linears first (quant/prune.h; rtn only), then store
  // them in `type`: a dense type keeps the zeros, SP_Q8_0 / SP_Q4_0 only the
  // kept weights (the other matrices then take Q8_0 / Q4_0).
  std::optional<PruneOptions> prune;
  // More metadata for the output, written after the input's (a key written
  // here replaces the input's): contextual sparsity's thresholds.
  std::function<void(gguf::Writer&)> metadata;
};

// A tensor of any type Tessera can read, in f32: [n_elements / ne0, ne0].
// Throws kCorruptFile for short data and non-finite values.
std::vector<float> read_f32(const gguf::TensorInfo& t);

// What happened to one tensor (progress and the report).
struct TensorDone {
  int64_t index = 0, total = 0;
  std::string name;
  DType type = DType::kF32;
  std::string how;           // "gptq", "rtn", "awq", "copy", "awq-folded norm", ...
  int64_t rows = 0, cols = 0;
  int64_t padded_cols = 0;   // stored width when padded, else 0
  size_t bytes = 0;
  double seconds = 0.0;
};

struct QuantizeResult {
  int64_t n_weights = 0;     // elements of the quantized matrices
  size_t weight_bytes = 0;   // their stored bytes
  int64_t n_expert_weights = 0;  // of which in a mixture's experts
  size_t expert_bytes = 0;
  size_t file_bytes = 0;
  double expert_bits_per_weight() const {
    return n_expert_weights ? 8.0 * static_cast<double>(expert_bytes) / static_cast<double>(n_expert_weights) : 0.0;
  }
  double bits_per_weight() const { return n_weights ? 8.0 * static_cast<double>(weight_bytes) / static_cast<double>(n_weights) : 0.0; }
};

// `stats` must be given when the method needs statistics; they are asked
// for layer by layer in the file's tensor order (quant/calibration.h
// LayerWindows gathers them a window at a time).
QuantizeResult quantize_model(const gguf::File& in, const std::string& out_path, const QuantizeOptions& opt,
                              StatsSource* stats, ThreadPool& pool,
                              const std::function<void(const TensorDone&)>& on_tensor = {});

}  // namespace tessera::quant
