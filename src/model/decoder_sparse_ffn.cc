// DecoderModel::sparse_gated_ffn: the gated FFN with contextual sparsity
// (model/ffn_sparsity.h). Every product gives the bits of its dense
// counterpart on the same masked input, so which path a step takes (gathered
// or dense up rows, transposed or dense down) is a matter of speed only.
#include <algorithm>
#include <cstring>

#include "adapters/lora.h"
#include "kernels/sparse.h"
#include "model/decoder.h"

namespace tessera {
namespace {

// Up rows are gathered while the union keeps at most this fraction of them
// (beyond it the packed dense product is as fast); the transposed down runs
// at most kernels::kSparseInputMaxTokens tokens and this fraction.
constexpr double kGatherUpMax = 0.85;
constexpr double kSparseDownMax = 0.85;

}  // namespace

void DecoderModel::sparse_gated_ffn(const DecoderLayer& L, FfnAct act, int64_t il, const ForwardBatch& batch,
                                    ForwardState& s) const {
  const FfnWeights& w = L.ffn;
  const FfnSparsity& sp = L.ffn_sparsity;
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, F = cfg_.n_ff;
  // Past kSparseInputMaxTokens tokens the union keeps nearly every neuron
  // (each token keeps its own half): gate and up densely, in one dispatch.
  const bool few = T <= kernels::kSparseInputMaxTokens;
  if (few) {
    kernels::matmul(w.gate, s.xb.data(), E, T, s.ff_gate.data(), F, s.ctx);
  } else {
    const kernels::MatmulOutput gate_up[] = {{&w.gate, s.ff_gate.data(), F}, {&w.up, s.ff_up.data(), F}};
    kernels::matmul_shared_input(gate_up, s.xb.data(), E, T, s.ctx);
  }
  apply_lora(batch, il, LoraTarget::kGate, s.xb.data(), E, s.ff_gate.data(), F, s.ctx);
  if (s.tap) tap_gate_activation(act, il, T, s);
  s.ffn_keep.resize(static_cast<size_t>((T + 1) * F));
  const int64_t kept = select_neurons(act == FfnAct::kGeluTanh ? sp.gelu : sp.silu, s.ff_gate.data(), T, F,
                                      s.ffn_keep.data(), s.ffn_union);
  const int64_t U = static_cast<int64_t>(s.ffn_union.size());
  s.ffn_neurons += T * F;
  s.ffn_kept += kept;
  s.ffn_union_rows += U;
  ++s.ffn_layer_steps;
  if (!few) {
    // up is done
  } else if (static_cast<double>(U) <= kGatherUpMax * static_cast<double>(F) && !kernels::is_sparse(w.up.view.type)) {
    s.ffn_up_rows.ensure(static_cast<size_t>(T * std::max<int64_t>(U, 1)));
    kernels::matmul_rows(w.up.view, s.ffn_union, s.xb.data(), E, T, s.ffn_up_rows.data(), U, s.ctx);
    std::memset(s.ff_up.data(), 0, static_cast<size_t>(T * F) * sizeof(float));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < U; ++k) s.ff_up[t * F + s.ffn_union[k]] = s.ffn_up_rows[t * U + k];
    }
  } else {
    kernels::matmul(w.up, s.xb.data(), E, T, s.ff_up.data(), F, s.ctx);
  }
  apply_lora(batch, il, LoraTarget::kUp, s.xb.data(), E, s.ff_up.data(), F, s.ctx);
  ffn_activate(act, s.ff_gate.data(), s.ff_up.data(), T * F, s.ctx.isa);
  // Branch-free (half the neurons go each way): the bits and-ed with 0 or ~0.
  uint32_t* h = reinterpret_cast<uint32_t*>(s.ff_gate.data());
  const uint8_t* keep = s.ffn_keep.data();
  for (int64_t i = 0; i < T * F; ++i) h[i] &= 0u - static_cast<uint32_t>(keep[i]);
  if (s.tap) s.tap("ffn_act", il, s.ff_gate.data(), T, F, F);  // the input of W_down
  if (!sp.down_t.empty() && few && static_cast<double>(U) <= kSparseDownMax * static_cast<double>(F)) {
    kernels::sparse_input_matmul(sp.down_t, s.ff_gate.data(), F, T, s.xb2.data(), E, s.ctx);
  } else {
    kernels::matmul(w.down, s.ff_gate.data(), F, T, s.xb2.data(), E, s.ctx);
  }
  apply_lora(batch, il, LoraTarget::kDown, s.ff_gate.data(), F, s.xb2.data(), E, s.ctx);
  add_residual(L.ffn_post_norm, "ffn_post_norm", il, T, s);
  if (s.tap) s.tap("layer_out", il, s.x.data(), T, E, E);
}

}  // namespace tessera
