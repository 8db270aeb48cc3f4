// qwen2: the llama layer with biases on the Q, K and V projections and RoPE
// in the NeoX (half-split) ordering.
#include "model/decoder.h"

namespace tessera {
namespace {

class Qwen2 final : public DecoderModel {
 public:
  explicit Qwen2(ModelLoader& ld) : DecoderModel(ld, {}, /*neox=*/true) {
    load_common(ld, /*rope_freqs=*/false);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/true, layers_[il]);
      load_ffn(ld, il, layers_[il]);
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
    gated_ffn(L, FfnAct::kSilu, il, batch, s);
  }
};

}  // namespace

std::unique_ptr<Model> make_qwen2(ModelLoader& ld) { return std::make_unique<Qwen2>(ld); }

}  // namespace tessera
