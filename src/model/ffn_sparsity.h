// Contextual sparsity in a gated FFN (CATS / TEAL-style, issue 42): per
// token, only the neurons whose activation |act(gate)| exceeds the layer's
// calibrated threshold are kept; the others' products are zero. So
//
//   h[t, i] = |act(g[t, i])| > threshold ? act(g[t, i]) * u[t, i] : 0
//   out[t]  = W_down h[t]
//
// the gate is computed in full (it decides), the up rows of the step's
// union of kept neurons are gathered (kernels::matmul_rows), and a Q8_0 down
// projection reads only the kept neurons' columns from a transposed copy
// (kernels/sparse_input.h) when the step has few tokens. Every path gives
// the bits of the dense FFN on the masked h, so a token's output never
// depends on its batch. Thresholds come from the file
// ("tessera.ffn_sparsity.threshold", one per layer, written by `tessera prune
// --ffn-sparsity`); TESSERA_FFN_SPARSITY=0 (read at load) runs the file dense.
#pragma once

#include <cstdint>
#include <vector>

#include "format/gguf.h"
#include "kernels/matmul.h"
#include "kernels/sparse_input.h"

namespace tessera {

// The metadata keys: the target fraction of neurons skipped, each layer's
// threshold of |act(gate)|, and the recall measured at calibration (the
// fraction of the top-k neurons by |h| that the threshold keeps).
inline constexpr const char* kFfnSparsityKey = "tessera.ffn_sparsity";
inline constexpr const char* kFfnThresholdKey = "tessera.ffn_sparsity.threshold";
inline constexpr const char* kFfnRecallKey = "tessera.ffn_sparsity.recall";

// The set {g : |act(g)| > threshold} of silu and tanh-GELU: (lo, hi) ∪ (above, inf)
// (lo >= hi: no negative gate is kept).
struct KeepInterval {
  float lo = 0.0f, hi = 0.0f, above = 0.0f;
  bool keeps(float g) const { return g > above || (g > lo && g < hi); }
};
// act(g) of silu (gelu: false) or tanh-GELU, in double.
double activation_value(bool gelu, double g);
KeepInterval silu_keep_interval(float threshold);
KeepInterval gelu_keep_interval(float threshold);

struct FfnSparsity {
  bool on = false;
  KeepInterval silu, gelu;
  kernels::TransposedQ8_0 down_t;  // empty: the down projection runs dense
};

// Each layer's threshold from the file (empty: none, or disabled by
// TESSERA_FFN_SPARSITY=0). Throws kCorruptFile on a wrong count or a
// negative / non-finite threshold.
std::vector<float> read_ffn_thresholds(const gguf::File& f, int64_t n_layer);

// The layer's sparsity for `threshold`; down_t is built when `down` is Q8_0.
FfnSparsity make_ffn_sparsity(float threshold, const kernels::WeightView& down);

// The step's kept neurons: keep[t * F + i] (keep holds (T + 1) * F bytes:
// row T is scratch), and the union of all tokens' (ascending). Returns the
// number kept over all tokens.
int64_t select_neurons(const KeepInterval& k, const float* gate, int64_t n_tokens, int64_t F, uint8_t* keep,
                       std::vector<int32_t>& union_rows);

}  // namespace tessera
