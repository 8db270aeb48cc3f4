// qwen3: the qwen2 layout without Q/K/V biases, with an RMSNorm over each
// head of q and k (attn_q_norm / attn_k_norm, [head_dim]) before RoPE, which
// is NeoX-ordered. qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): the same layer
// with a mixture of SwiGLU experts in place of the FFN: softmax routing, top-k
// weights renormalised, no shared expert.
#include "model/decoder.h"

namespace tessera {
namespace {

class Qwen3 final : public DecoderModel {
 public:
  // `moe`: the qwen3moe file, whose FFN is a mixture of experts.
  Qwen3(ModelLoader& ld, bool moe) : DecoderModel(ld, {.moe_required = moe}, /*neox=*/true) {
    load_common(ld, /*rope_freqs=*/false);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/false, layers_[il]);
      load_qk_norm(ld, il, layers_[il]);
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
    qkv(L.attn, il, batch, s);
    qk_norm(L.attn, T, s);
    rope(il, T, s);
    attention(L, il, batch, kv, s);
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    if (cfg_.moe()) {
      moe_ffn(L, MoeWeighting::kRenormalised, il, batch, s);
    } else {
      gated_ffn(L, FfnAct::kSilu, il, batch, s);
    }
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen3(ModelLoader& ld) { return std::make_unique<Qwen3>(ld, /*moe=*/false); }
std::unique_ptr<Model> make_qwen3moe(ModelLoader& ld) { return std::make_unique<Qwen3>(ld, /*moe=*/true); }

}  // namespace tessera
