// gpt-oss (gpt-oss-20b, gpt-oss-120b): RMSNorm; attention with biases on Q,
// K, V and the output, NeoX RoPE (YaRN in the released files), queries
// scaled by 1/sqrt(head_dim) and a learned sink per head (a logit in each
// softmax's sum with no value, attn_sinks); even layers see a sliding window
// (attention.sliding_window, pattern 2), odd ones everything; then the norm
// llama.cpp names post_attention_norm and a mixture of experts with biases
// everywhere (router, gate, up, down): the top-k experts by router logit,
// weighted by a softmax over those k logits, each a clamped SwiGLU
// (kernels::swiglu_oai_mul). No shared expert; the output matrix is its own.
#include "core/error.h"
#include "model/decoder.h"

namespace tessera {
namespace {

class GptOss final : public DecoderModel {
 public:
  explicit GptOss(ModelLoader& ld) : DecoderModel(ld, {.swa_period = 2, .moe_required = true}, /*neox=*/true) {
    if (cfg_.swa_window <= 0) {
      fail(ErrorCode::kCorruptFile, "{}: gpt-oss needs 'gpt-oss.attention.sliding_window' > 0 (its local layers' window)",
           ld.file().path());
    }
    if (cfg_.n_ff_shexp > 0) {
      fail(ErrorCode::kCorruptFile, "{}: gpt-oss has no shared expert, but the file gives "
           "'gpt-oss.expert_shared_feed_forward_length'", ld.file().path());
    }
    load_common(ld, /*rope_freqs=*/false);
    for (int64_t il = 0; il < cfg_.n_layer; ++il) {
      DecoderLayer& L = layers_[il];
      load_attention(ld, il, /*bias=*/true, L);
      load_attention_bias_and_sinks(ld, il, L);
      load_moe(ld, il, L, "post_attention_norm.weight");
      load_moe_biases(ld, il, L.moe);
    }
  }

 private:
  void layer(const DecoderLayer& L, int64_t il, const ForwardBatch& batch, KvCache& kv,
             ForwardState& s) const override {
    const int64_t T = batch.n_tokens();
    norm(L.attn_norm, "attn_norm", il, T, s);
    qkv(L.attn, il, batch, s);  // with the biases
    rope(il, T, s);
    attention(L, il, batch, kv, s);  // with the sinks and the output bias
    norm(L.ffn_norm, "ffn_norm", il, T, s);
    moe_ffn(L, MoeWeighting::kSoftmaxOfChosen, il, batch, s, FfnAct::kSwigluOai);
  }
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss(ModelLoader& ld) { return std::make_unique<GptOss>(ld); }

}  // namespace tessera
