// gemma3 (text): the gemma2 layer with an RMSNorm over each head of q and k
// (attn_q_norm / attn_k_norm) before RoPE and no attention soft-capping.
// With attention.sliding_window in the file, five local layers (that
// window; RoPE base rope.freq_base_swa, default 10000, unscaled) alternate
// with one global layer (layer il global when (il + 1) % 6 == 0;
// sliding_window_pattern), which turns with rope.freq_base and the file's
// RoPE scaling (linear on Gemma 3 4B+); without it every layer is global.
// Final logits soft-capped only when final_logit_softcapping is given; the
// output matrix is output.weight or token_embd.
#include <cmath>

#include "model/decoder.h"

namespace tessera {
namespace {

class Gemma3 final : public DecoderModel {
 public:
  explicit Gemma3(ModelLoader& ld)
      : DecoderModel(ld, {.swa_period = 6, .swa_rope_base = 10000.0f, .final_softcap = true, .attention_scale = true}, /*neox=*/true) {
    load_common(ld, /*rope_freqs=*/false);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      load_attention(ld, il, /*bias=*/false, layers_[il]);
      load_qk_norm(ld, il, layers_[il]);
      load_post_norms(ld, il, layers_[il]);
      load_ffn(ld, il, layers_[il]);
    }
    embd_scale_ = std::sqrt(static_cast<float>(cfg_.n_embd));
    if (cfg_.attn_scale == 0.0f) cfg_.attn_scale = gemma_query_scale(cfg_, file_heads(), /*n_layer_27b=*/62);
  }

 private:
  void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
             ForwardState& s) const override {
    const int64_t T = batch.n_tokens();
    norm(L.attn_norm, "attn_norm", il, T, s);
    qkv(L.attn, il, batch, s);
    qk_norm(L.attn, T, s);
    rope(il, T, s);  // the local or the global RoPE
    attention(L, il, batch, kv, s);  // windowed on local layers, post-normed
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    gated_ffn(L, FfnAct::kGeluTanh, il, batch, s);  // post-normed
  }
};

}  // namespace

std::unique_ptr<Model> make_gemma3(ModelLoader& ld) { return std::make_unique<Gemma3>(ld); }

}  // namespace tessera
