// Weight pruning (issue 42): per output row, the weights with the lowest
// score are set to zero.
//   magnitude  score |W_ij|
//   wanda      score |W_ij| * ||X_j||_2 (Sun et al. 2023, "A Simple and
//              Effective Pruning Approach for LLMs"): the weight's size times
//              the norm of its input channel over calibration tokens, the
//              diagonal of the statistics GPTQ gathers (quant/calibration.h);
//              no weight update, no retraining.
// Unstructured: a fraction `sparsity` of each row (rounded to the nearest
// count); N:M (2:4, 4:8): in each group of M consecutive inputs of a row,
// the M - N lowest. Ties go to the lower column (results do not depend on
// the sort). Which matrices: the linears of the blocks (attention and FFN,
// experts excluded); the embedding and the output head stay dense, as Wanda
// does. Fused tensors (Phi-3's attn_qkv and gate-up ffn_up) stay dense too:
// the decoder splits them by rows, which a sparse layout cannot.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quant/calibration.h"

namespace tessera::quant {

enum class PruneMethod { kMagnitude, kWanda };
PruneMethod parse_prune_method(const std::string& s);  // "magnitude", "wanda"
const char* prune_method_name(PruneMethod m);

struct PruneOptions {
  PruneMethod method = PruneMethod::kWanda;
  double sparsity = 0.5;  // unstructured: fraction of each row pruned (ignored for N:M)
  int n = 0, m = 0;       // N:M when m > 0: keep n of every m consecutive inputs
  bool structured() const { return m > 0; }
  double fraction() const { return structured() ? 1.0 - static_cast<double>(n) / m : sparsity; }
};

// "2:4" -> n = 2, m = 4 (0 < n < m, m at most 64 and dividing 64).
void parse_nm(const std::string& s, PruneOptions* opt);

// Whether the tensor named `name` is pruned: a 2-D linear of a block.
bool prunable(const std::string& name);

// ||X_j||_2 of each input channel: sqrt of H's diagonal.
std::vector<float> input_norms(const InputStats& s);

// Prunes w ([rows, cols] f32) in place; `norms` ([cols]) only for Wanda.
// Returns the weights kept (nonzero weights stay nonzero unless pruned).
int64_t prune_matrix(float* w, int64_t rows, int64_t cols, std::span<const float> norms, const PruneOptions& opt);

}  // namespace tessera::quant
