// llama (and mistral): RMSNorm, RoPE in the normal (interleaved) ordering
// with Llama 3's per-frequency factors when the file has rope_freqs.weight,
// grouped-query attention, with a sliding window when the file declares one
// ("<arch>.attention.sliding_window", Mistral 7B v0.1), SwiGLU; or, when the
// file has llama.expert_count (Mixtral), a mixture of SwiGLU experts with
// softmax routing and the top-k weights renormalised.
#include "model/decoder.h"

namespace tessera {
namespace {

class Llama final : public DecoderModel {
 public:
  explicit Llama(ModelLoader& ld) : DecoderModel(ld, {.sliding_window = true, .moe = true}, /*neox=*/false) {
    load_common(ld, /*rope_freqs=*/true);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/false, layers_[il]);
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

std::unique_ptr<Model> make_llama(ModelLoader& ld) { return std::make_unique<Llama>(ld); }

}  // namespace tessera
