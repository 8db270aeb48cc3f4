// phi3 (Phi-3, Phi-3.5, Phi-4-mini): the llama layer with fused matrices,
// attn_qkv ([q; k; v] rows) and ffn_up ([gate; up] rows, SwiGLU), NeoX
// RoPE, LongRoPE when the file has rope_factors_short / rope_factors_long
// (with rope.scaling.attn_factor on cos and sin), and a sliding window on
// every layer when attention.sliding_window is given and not 0 (Phi-4's
// converter writes 0 for none). llama.cpp currently ignores Phi-3's window.
#include "model/decoder.h"

namespace tessera {
namespace {

class Phi3 final : public DecoderModel {
 public:
  explicit Phi3(ModelLoader& ld) : DecoderModel(ld, {.sliding_window = true}, /*neox=*/true) {
    load_common(ld, /*rope_freqs=*/false);
    load_long_rope(ld);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention_fused(ld, il, layers_[il]);
      load_ffn_fused(ld, il, layers_[il]);
    }
  }

 private:
  void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
             ForwardState& s) const override {
    const int64_t T = batch.n_tokens();
    norm(L.attn_norm, "attn_norm", il, T, s);
    qkv(L.attn, il, batch, s);  // views of attn_qkv
    rope(il, T, s);
    attention(L, il, batch, kv, s);
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    gated_ffn(L, FfnAct::kSilu, il, batch, s);  // views of ffn_up
  }
};

}  // namespace

std::unique_ptr<Model> make_phi3(ModelLoader& ld) { return std::make_unique<Phi3>(ld); }

}  // namespace tessera
