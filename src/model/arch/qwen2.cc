// qwen2: the llama layer with biases on the Q, K and V projections and RoPE
// in the NeoX (half-split) ordering. qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B):
// the same layer with a mixture of SwiGLU experts in place of the FFN:
// softmax routing whose top-k weights are used as they are (not
// renormalised), plus a shared expert every token goes through, scaled by
// sigmoid(x . ffn_gate_inp_shexp).
#include "model/decoder.h"

namespace tessera {
namespace {

class Qwen2 final : public DecoderModel {
 public:
  // `moe`: the qwen2moe file, whose FFN is a mixture of experts.
  Qwen2(ModelLoader& ld, bool moe) : DecoderModel(ld, {.moe_required = moe}, /*neox=*/true) {
    load_common(ld, /*rope_freqs=*/false);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/true, layers_[il]);
      if (cfg_.moe()) {
        load_moe(ld, il, layers_[il]);
      } else {
        load_ffn(ld, il, layers_[il]);
      }
    }
  }

 private:
  void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
             ForwardState& s) const override {
    const int64_t T = batch.n_tokens();
    norm(L.attn_norm, "attn_norm", il, T, s);
    qkv(L.attn, il, batch, s);  // with the biases
    rope(il, T, s);
    attention(L, il, batch, kv, s);
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    if (cfg_.moe()) {
      moe_ffn(L, MoeWeighting::kSoftmax, il, batch, s);
    } else {
      gated_ffn(L, FfnAct::kSilu, il, batch, s);
    }
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen2(ModelLoader& ld) { return std::make_unique<Qwen2>(ld, /*moe=*/false); }
std::unique_ptr<Model> make_qwen2moe(ModelLoader& ld) { return std::make_unique<Qwen2>(ld, /*moe=*/true); }

}  // namespace tessera
