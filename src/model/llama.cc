#include "model/llama.h"

#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/weights.h"

namespace tessera {
namespace {

std::string blk(int64_t il, const char* name) { return fmt::format("blk.{}.{}", il, name); }

void add_bias(float* x, int64_t stride, int64_t n_tokens, const std::vector<float>& b) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* row = x + t * stride;
    for (size_t i = 0; i < b.size(); ++i) row[i] += b[i];
  }
}

}  // namespace

LlamaModel::LlamaModel(const gguf::File& f, const LlamaVariant& variant) : variant_(variant) {
  cfg_ = read_config(f);
  cfg_.rope_neox = variant.rope_neox;
  const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
  cfg_.n_vocab = emb.ne[1];
  const int64_t E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim(), F = cfg_.n_ff;
  tok_embd_ = load_matrix(f, "token_embd.weight", E, cfg_.n_vocab);
  out_norm_ = load_vector(f, "output_norm.weight", E);
  cfg_.tied_output = f.find_tensor("output.weight") == nullptr;
  output_ = kernels::prepare_weight(cfg_.tied_output ? tok_embd_ : load_matrix(f, "output.weight", E, cfg_.n_vocab));
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    LlamaLayer& L = layers_[il];
    L.attn_norm = load_vector(f, blk(il, "attn_norm.weight"), E);
    L.wq = kernels::prepare_weight(load_matrix(f, blk(il, "attn_q.weight"), E, Q));
    L.wk = kernels::prepare_weight(load_matrix(f, blk(il, "attn_k.weight"), E, KV));
    L.wv = kernels::prepare_weight(load_matrix(f, blk(il, "attn_v.weight"), E, KV));
    L.wo = kernels::prepare_weight(load_matrix(f, blk(il, "attn_output.weight"), Q, E));
    if (variant.qkv_bias) {
      L.bq = load_vector(f, blk(il, "attn_q.bias"), Q);
      L.bk = load_vector(f, blk(il, "attn_k.bias"), KV);
      L.bv = load_vector(f, blk(il, "attn_v.bias"), KV);
    }
    L.ffn_norm = load_vector(f, blk(il, "ffn_norm.weight"), E);
    L.w_gate = kernels::prepare_weight(load_matrix(f, blk(il, "ffn_gate.weight"), E, F));
    L.w_up = kernels::prepare_weight(load_matrix(f, blk(il, "ffn_up.weight"), E, F));
    L.w_down = kernels::prepare_weight(load_matrix(f, blk(il, "ffn_down.weight"), F, E));
  }
}

size_t LlamaModel::bytes_per_token() const {
  size_t n = tok_embd_.row_bytes + matrix_bytes(output_.view);
  for (const LlamaLayer& L : layers_) {
    n += matrix_bytes(L.wq.view) + matrix_bytes(L.wk.view) + matrix_bytes(L.wv.view) + matrix_bytes(L.wo.view) +
         matrix_bytes(L.w_gate.view) + matrix_bytes(L.w_up.view) + matrix_bytes(L.w_down.view);
  }
  return n;
}

Model::MatmulWork LlamaModel::matmul_work() const {
  auto macs = [](const kernels::PreparedWeight& w) { return w.view.rows * w.view.cols; };
  MatmulWork work;
  for (const LlamaLayer& L : layers_) {
    work.per_token += macs(L.wq) + macs(L.wk) + macs(L.wv) + macs(L.wo) + macs(L.w_gate) + macs(L.w_up) + macs(L.w_down);
  }
  work.per_logit_row = macs(output_);
  return work;
}

void LlamaModel::attention_block(const LlamaLayer& L, int64_t il, const ForwardBatch& batch,
                                 KvCache& kv, ForwardState& s) const {
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, Q = cfg_.q_dim(), KV = cfg_.kv_dim();
  const Isa isa = s.ctx.isa;
  for (int64_t t = 0; t < T; ++t) {
    kernels::rmsnorm(s.x.data() + t * E, L.attn_norm.data(), s.xb.data() + t * E, E, cfg_.rms_eps, isa);
  }
  if (s.tap) s.tap("attn_norm", il, s.xb.data(), T, E, E);
  const kernels::MatmulOutput qkv[] = {{&L.wq, s.q.data(), Q}, {&L.wk, s.k.data(), KV}, {&L.wv, s.v.data(), KV}};
  kernels::matmul_shared_input(qkv, s.xb.data(), E, T, s.ctx);
  if (variant_.qkv_bias) {
    add_bias(s.q.data(), Q, T, L.bq);
    add_bias(s.k.data(), KV, T, L.bk);
    add_bias(s.v.data(), KV, T, L.bv);
  }
  const kernels::RopeParams rope = rope_params();
  const int64_t half = cfg_.n_rot / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* c = s.rope_cos.data() + t * half;
    const float* sn = s.rope_sin.data() + t * half;
    kernels::rope_rotate(s.q.data() + t * Q, cfg_.n_head, cfg_.head_dim, rope, c, sn, isa);
    kernels::rope_rotate(s.k.data() + t * KV, cfg_.n_head_kv, cfg_.head_dim, rope, c, sn, isa);
  }
  if (s.tap) {
    s.tap("q", il, s.q.data(), T, Q, Q);
    s.tap("k", il, s.k.data(), T, KV, KV);
    s.tap("v", il, s.v.data(), T, KV, KV);
  }
  const kernels::KvLayerView layer = kv.layer(il);
  const kernels::NewKv fresh{s.k.data(), s.v.data(), KV, batch.slots.data(), T};
  const kernels::AttentionShape shape{static_cast<int32_t>(cfg_.n_head),
                                      1.0f / std::sqrt(static_cast<float>(cfg_.head_dim))};
  kernels::paged_attention(layer, s.q.data(), Q, s.att.data(), Q, batch.seqs, shape, s.ctx, &fresh);
  if (s.tap) s.tap("attn_out", il, s.att.data(), T, Q, Q);
  kernels::matmul(L.wo, s.att.data(), Q, T, s.xb2.data(), E, s.ctx);
  kernels::add_inplace(s.x.data(), s.xb2.data(), T * E, isa);
}

void LlamaModel::ffn_block(const LlamaLayer& L, int64_t il, int64_t T, ForwardState& s) const {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff;
  const Isa isa = s.ctx.isa;
  for (int64_t t = 0; t < T; ++t) {
    kernels::rmsnorm(s.x.data() + t * E, L.ffn_norm.data(), s.xb.data() + t * E, E, cfg_.rms_eps, isa);
  }
  if (s.tap) s.tap("ffn_norm", il, s.xb.data(), T, E, E);
  const kernels::MatmulOutput gate_up[] = {{&L.w_gate, s.ff_gate.data(), F}, {&L.w_up, s.ff_up.data(), F}};
  kernels::matmul_shared_input(gate_up, s.xb.data(), E, T, s.ctx);
  kernels::silu_mul(s.ff_gate.data(), s.ff_up.data(), T * F, isa);
  kernels::matmul(L.w_down, s.ff_gate.data(), F, T, s.xb2.data(), E, s.ctx);
  kernels::add_inplace(s.x.data(), s.xb2.data(), T * E, isa);
  if (s.tap) s.tap("layer_out", il, s.x.data(), T, E, E);
}

void LlamaModel::forward(const ForwardBatch& batch, KvCache& kv, ForwardState& s) const {
  const int64_t T = batch.n_tokens(), E = cfg_.n_embd, V = cfg_.n_vocab;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  TESSERA_ASSERT(batch.positions.size() == batch.tokens.size() && batch.slots.size() == batch.tokens.size());
  if (T == 0) return;
  const size_t t = static_cast<size_t>(T);
  s.x.ensure(t * E);
  s.xb.ensure(t * E);
  s.xb2.ensure(t * E);
  s.q.ensure(t * cfg_.q_dim());
  s.att.ensure(t * cfg_.q_dim());
  s.k.ensure(t * cfg_.kv_dim());
  s.v.ensure(t * cfg_.kv_dim());
  s.ff_gate.ensure(t * cfg_.n_ff);
  s.ff_up.ensure(t * cfg_.n_ff);
  s.logits.ensure(static_cast<size_t>(R) * V);
  if (s.ctx.ws == nullptr) s.ctx.ws = &s.ws;

  for (int64_t i = 0; i < T; ++i) {
    const int32_t id = batch.tokens[i];
    TESSERA_CHECK(id >= 0 && id < V, kInvalidArgument, "token id {} out of range (vocabulary {})", id, V);
    kernels::dequantize_row(tok_embd_.type, tok_embd_.data + static_cast<size_t>(id) * tok_embd_.row_bytes,
                            s.x.data() + i * E, E);
  }
  if (s.tap) s.tap("embd", -1, s.x.data(), T, E, E);
  // RoPE angles depend on the position only: once per token, not per layer.
  const int64_t half = cfg_.n_rot / 2;
  s.rope_cos.ensure(t * static_cast<size_t>(half));
  s.rope_sin.ensure(t * static_cast<size_t>(half));
  for (int64_t i = 0; i < T; ++i) {
    kernels::rope_angles(batch.positions[i], rope_params(), s.rope_cos.data() + i * half, s.rope_sin.data() + i * half);
  }
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    attention_block(layers_[il], il, batch, kv, s);
    ffn_block(layers_[il], il, T, s);
  }
  // Final norm and logits only for the rows that are sampled.
  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = batch.logit_rows[r];
    TESSERA_ASSERT(row >= 0 && row < T);
    kernels::rmsnorm(s.x.data() + static_cast<int64_t>(row) * E, out_norm_.data(), s.xb.data() + r * E, E,
                     cfg_.rms_eps, s.ctx.isa);
  }
  if (s.tap) s.tap("result_norm", -1, s.xb.data(), R, E, E);
  kernels::matmul(output_, s.xb.data(), E, R, s.logits.data(), V, s.ctx);
}

}  // namespace tessera
