// gemma2: token embeddings scaled by sqrt(n_embd); RMSNorm before and after
// attention and the FFN (post_attention_norm, post_ffw_norm; llama.cpp's
// converter has already added Gemma's 1 to every norm weight, so they are
// used as stored); NeoX RoPE; queries scaled by 1/sqrt(head_dim), or by
// 1/sqrt(n_embd / n_head) on the 27B model (46 layers), as llama.cpp does
// for Gemma's query_pre_attn_scalar, which GGUF does not carry; attention
// scores soft-capped (attn_logit_softcapping, default 50) and even layers
// local with a sliding window (attention.sliding_window, default 4096;
// sliding_window_pattern 2), odd ones global; a GeGLU FFN (tanh GELU); the
// output matrix is always token_embd; final logits soft-capped
// (final_logit_softcapping, default 30).
#include <cmath>

#include "model/decoder.h"
#include "model/weights.h"

namespace tessera {
namespace {

class Gemma2 final : public DecoderModel {
 public:
  explicit Gemma2(ModelLoader& ld)
      : DecoderModel(ld,
                     {.swa_period = 2, .swa_window = 4096, .softcap = true, .attn_softcap = 50.0f,
                      .final_softcap_default = 30.0f, .attention_scale = true},
                     /*neox=*/true) {
    // llama.cpp's gemma2 reads no output matrix; a rotated file (quant/rotate.h) has its own.
    load_common(ld, /*rope_freqs=*/false, /*tied=*/!ld.file().has(kPostNormRotationKey));
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/false, layers_[il]);
      load_post_norms(ld, il, layers_[il]);
      load_ffn(ld, il, layers_[il]);
    }
    embd_scale_ = std::sqrt(static_cast<float>(cfg_.n_embd));
    if (cfg_.attn_scale == 0.0f) cfg_.attn_scale = gemma_query_scale(cfg_, file_heads(), /*n_layer_27b=*/46);
  }

 private:
  void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
             ForwardState& s) const override {
    const int64_t T = batch.n_tokens();
    norm(L.attn_norm, "attn_norm", il, T, s);
    qkv(L.attn, il, batch, s);
    rope(il, T, s);
    attention(L, il, batch, kv, s);  // soft-capped, windowed on local layers, post-normed
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    gated_ffn(L, FfnAct::kGeluTanh, il, batch, s);  // post-normed
  }
};

}  // namespace

std::unique_ptr<Model> make_gemma2(ModelLoader& ld) { return std::make_unique<Gemma2>(ld); }

}  // namespace tessera
