#include "train/lora_step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "train/ops.h"

namespace tessera::train {

namespace {

// The whole tensor `name` as F32 ([rows][cols] as GGUF stores it).
std::vector<float> read_f32(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo& t = f.tensor(name);
  TESSERA_CHECK(kernels::can_dequantize(t.type), kInvalidArgument, "training: tensor '{}' has a type it cannot read",
                name);
  TESSERA_CHECK(!f.has("tessera.padded_cols." + name), kInvalidArgument,
                "training: tensor '{}' is stored with padded rows (not supported yet)", name);
  int64_t n = 1;
  for (int64_t d : t.ne) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  kernels::dequantize_row(t.type, f.bytes(t), out.data(), n);
  return out;
}

// y = x Wᵀ + scale (x Aᵀ) B for one linear of n tokens; ax ([n][rank]) kept
// for the backward when there is a pair.
void lora_linear(const float* x, const std::vector<float>& w, const LoraPair* p, int64_t n, int64_t in, int64_t out,
                 float* y, std::vector<float>* ax) {
  linear(x, w.data(), n, in, out, y);
  if (p == nullptr) return;
  ax->assign(static_cast<size_t>(n * p->rank), 0.0f);
  linear(x, p->a.data(), n, in, p->rank, ax->data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < p->rank; ++k) {
      const float s = p->scale * (*ax)[static_cast<size_t>(t * p->rank + k)];
      const float* b = p->b.data() + k * out;
      for (int64_t o = 0; o < out; ++o) y[t * out + o] += s * b[o];
    }
  }
}

// dx += dy W + (scale dy Bᵀ) A; the pair's gradients into g.
void lora_linear_backward(const float* x, const std::vector<float>& w, const LoraPair* p, const std::vector<float>& ax,
                          const float* dy, int64_t n, int64_t in, int64_t out, float* dx, LoraPair* g) {
  linear_backward(x, w.data(), dy, n, in, out, dx, static_cast<float*>(nullptr));
  if (p == nullptr) return;
  std::vector<float> dax(static_cast<size_t>(n * p->rank), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < p->rank; ++k) {
      const float* b = p->b.data() + k * out;
      float* gb = g->b.data() + k * out;
      const float axs = p->scale * ax[static_cast<size_t>(t * p->rank + k)];
      float acc = 0.0f;
      for (int64_t o = 0; o < out; ++o) {
        acc += dy[t * out + o] * b[o];
        gb[o] += axs * dy[t * out + o];
      }
      dax[static_cast<size_t>(t * p->rank + k)] = p->scale * acc;
    }
  }
  linear_backward(x, p->a.data(), dax.data(), n, in, p->rank, dx, g->a.data());
}

}  // namespace

LoraTrainModel::LoraTrainModel(const gguf::File& file) : cfg_(read_config(file)) {
  TESSERA_CHECK(cfg_.arch == "llama" && !cfg_.moe(), kInvalidArgument,
                "training: architecture '{}' is not supported yet (llama dense only)", cfg_.arch);
  TESSERA_CHECK(cfg_.rope_freq_scale == 1.0f && cfg_.swa_window == 0 && cfg_.n_rot % 2 == 0, kInvalidArgument,
                "training: RoPE scaling and sliding windows are not supported yet");
  embd_ = read_f32(file, "token_embd.weight");
  cfg_.n_vocab = file.tensor("token_embd.weight").ne[1];  // read_config leaves it to the tokenizer
  out_norm_ = read_f32(file, "output_norm.weight");
  if (file.find_tensor("output.weight") != nullptr) output_ = read_f32(file, "output.weight");
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    Layer& L = layers_[static_cast<size_t>(il)];
    const std::string blk = "blk." + std::to_string(il) + ".";
    L.attn_norm = read_f32(file, blk + "attn_norm.weight");
    L.ffn_norm = read_f32(file, blk + "ffn_norm.weight");
    for (int t = 0; t < kNumLoraTargets; ++t) L.w[t] = read_f32(file, blk + kLoraTargetNames[t] + ".weight");
  }
}

// What one layer's backward reads of its forward.
struct LoraTrainModel::Tape {
  std::vector<float> x_in, inv1, h1, q, k, v, lse, att, x_mid, inv2, h2, g, u, m;
  std::vector<float> ax[kNumLoraTargets];
};

double LoraTrainModel::run(const Pass& pass) const {
  const std::span<const int32_t> tokens = pass.tokens;
  const LoraAdapter* lora = pass.lora;
  LoraAdapter* grads = pass.lora_grads;
  const int64_t E = cfg_.n_embd, H = cfg_.n_head, KH = cfg_.n_head_kv;
  const int64_t nv = pass.prompt != nullptr ? static_cast<int64_t>(pass.prompt->size()) / E : 0;
  TESSERA_CHECK(pass.prompt == nullptr || (nv >= 1 && nv * E == static_cast<int64_t>(pass.prompt->size())),
                kInvalidArgument, "training: a soft prompt of {} values is not rows of {}",
                pass.prompt ? pass.prompt->size() : 0, E);
  const int64_t n = nv + static_cast<int64_t>(tokens.size());
  const int64_t hd = cfg_.head_dim, Q = cfg_.q_dim(), KV = cfg_.kv_dim(), F = cfg_.n_ff, V = cfg_.n_vocab;
  TESSERA_CHECK(n >= 1, kInvalidArgument, "training: an empty sequence");
  TESSERA_CHECK(lora == nullptr || static_cast<int64_t>(lora->layers.size()) == cfg_.n_layer, kInvalidArgument,
                "training: the adapter has {} layers, the model {}", lora ? lora->layers.size() : 0, cfg_.n_layer);
  auto pair = [&](int64_t il, int t) -> const LoraPair* {
    if (lora == nullptr) return nullptr;
    const LoraPair* p = lora->get(il, static_cast<LoraTarget>(t));
    TESSERA_CHECK(p == nullptr || p->type == kernels::LoraWeightType::kF32, kInvalidArgument,
                  "training: adapters are trained in F32");
    return p;
  };
  // RoPE angles of each position.
  kernels::RopeParams rp;
  rp.n_rot = cfg_.n_rot;
  rp.freq_base = cfg_.rope_freq_base;
  rp.neox = cfg_.rope_neox;
  const int64_t half = cfg_.n_rot / 2;
  std::vector<float> cos(static_cast<size_t>(n * half)), sin(cos.size());
  for (int64_t t = 0; t < n; ++t) kernels::rope_angles(t, rp, cos.data() + t * half, sin.data() + t * half);
  const float scale = cfg_.attn_scale > 0.0f ? cfg_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));

  std::vector<float> x(static_cast<size_t>(n * E));
  if (nv > 0) std::copy(pass.prompt->begin(), pass.prompt->end(), x.begin());
  for (int64_t t = nv; t < n; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t - nv)];
    TESSERA_CHECK(id >= 0 && id < V, kInvalidArgument, "training: token {} is outside the vocabulary", id);
    std::copy_n(embd_.begin() + id * E, E, x.begin() + t * E);
  }
  std::vector<Tape> tape(static_cast<size_t>(cfg_.n_layer));
  for (int64_t il = 0; il < cfg_.n_layer; ++il) {
    const Layer& L = layers_[static_cast<size_t>(il)];
    Tape& T = tape[static_cast<size_t>(il)];
    T.x_in = x;
    T.inv1.resize(n);
    T.h1.resize(n * E);
    rmsnorm(x.data(), L.attn_norm.data(), n, E, cfg_.rms_eps, T.h1.data(), T.inv1.data());
    T.q.resize(n * Q);
    T.k.resize(n * KV);
    T.v.resize(n * KV);
    lora_linear(T.h1.data(), L.w[0], pair(il, 0), n, E, Q, T.q.data(), &T.ax[0]);
    lora_linear(T.h1.data(), L.w[1], pair(il, 1), n, E, KV, T.k.data(), &T.ax[1]);
    lora_linear(T.h1.data(), L.w[2], pair(il, 2), n, E, KV, T.v.data(), &T.ax[2]);
    rope(T.q.data(), n, H, hd, cfg_.n_rot, cos.data(), sin.data(), cfg_.rope_neox, false);
    rope(T.k.data(), n, KH, hd, cfg_.n_rot, cos.data(), sin.data(), cfg_.rope_neox, false);
    T.att.resize(n * Q);
    T.lse.resize(H * n);
    attention(T.q.data(), T.k.data(), T.v.data(), n, H, KH, hd, scale, T.att.data(), T.lse.data());
    std::vector<float> o(static_cast<size_t>(n * E));
    lora_linear(T.att.data(), L.w[3], pair(il, 3), n, Q, E, o.data(), &T.ax[3]);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    T.x_mid = x;
    T.inv2.resize(n);
    T.h2.resize(n * E);
    rmsnorm(x.data(), L.ffn_norm.data(), n, E, cfg_.rms_eps, T.h2.data(), T.inv2.data());
    T.g.resize(n * F);
    T.u.resize(n * F);
    T.m.resize(n * F);
    lora_linear(T.h2.data(), L.w[4], pair(il, 4), n, E, F, T.g.data(), &T.ax[4]);
    lora_linear(T.h2.data(), L.w[5], pair(il, 5), n, E, F, T.u.data(), &T.ax[5]);
    swiglu(T.g.data(), T.u.data(), n * F, T.m.data());
    lora_linear(T.m.data(), L.w[6], pair(il, 6), n, F, E, o.data(), &T.ax[6]);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  }
  std::vector<float> inv_out(n), hf(static_cast<size_t>(n * E)), logits(static_cast<size_t>(n * V));
  rmsnorm(x.data(), out_norm_.data(), n, E, cfg_.rms_eps, hf.data(), inv_out.data());
  const std::vector<float>& w_out = output_.empty() ? embd_ : output_;
  linear(hf.data(), w_out.data(), n, E, V, logits.data());
  if (pass.logits != nullptr) *pass.logits = logits;
  if (grads == nullptr && pass.prompt_grad == nullptr) return 0.0;

  // Loss and backward: each token predicts the next (the virtual rows predict nothing).
  std::vector<int32_t> targets(static_cast<size_t>(n), -1);
  for (int64_t t = nv; t + 1 < n; ++t) targets[static_cast<size_t>(t)] = tokens[static_cast<size_t>(t - nv + 1)];
  std::vector<float> dlogits(logits.size());
  const double loss = cross_entropy(logits.data(), n, V, targets.data(), dlogits.data());
  std::vector<float> dhf(hf.size(), 0.0f), dx(x.size(), 0.0f);
  linear_backward(hf.data(), w_out.data(), dlogits.data(), n, E, V, dhf.data(), static_cast<float*>(nullptr));
  rmsnorm_backward(x.data(), out_norm_.data(), inv_out.data(), dhf.data(), n, E, dx.data(), static_cast<float*>(nullptr));
  auto grad_pair = [&](int64_t il, int t) -> LoraPair* {
    if (pair(il, t) == nullptr || grads == nullptr) return nullptr;
    LoraPair& g = grads->layers[static_cast<size_t>(il)][static_cast<size_t>(t)];
    const LoraPair& p = *pair(il, t);
    if (g.a.size() != p.a.size()) g.a.assign(p.a.size(), 0.0f);
    if (g.b.size() != p.b.size()) g.b.assign(p.b.size(), 0.0f);
    return &g;
  };
  for (int64_t il = cfg_.n_layer - 1; il >= 0; --il) {
    const Layer& L = layers_[static_cast<size_t>(il)];
    const Tape& T = tape[static_cast<size_t>(il)];
    // FFN: x_out = x_mid + down(swiglu(gate(h2), up(h2))).
    std::vector<float> dm(static_cast<size_t>(n * F), 0.0f), dg(dm.size(), 0.0f), du(dm.size(), 0.0f);
    lora_linear_backward(T.m.data(), L.w[6], pair(il, 6), T.ax[6], dx.data(), n, F, E, dm.data(), grad_pair(il, 6));
    swiglu_backward(T.g.data(), T.u.data(), dm.data(), n * F, dg.data(), du.data());
    std::vector<float> dh2(static_cast<size_t>(n * E), 0.0f);
    lora_linear_backward(T.h2.data(), L.w[4], pair(il, 4), T.ax[4], dg.data(), n, E, F, dh2.data(), grad_pair(il, 4));
    lora_linear_backward(T.h2.data(), L.w[5], pair(il, 5), T.ax[5], du.data(), n, E, F, dh2.data(), grad_pair(il, 5));
    rmsnorm_backward(T.x_mid.data(), L.ffn_norm.data(), T.inv2.data(), dh2.data(), n, E, dx.data(),
                     static_cast<float*>(nullptr));
    // Attention: x_mid = x_in + o(attention(rope(q(h1)), rope(k(h1)), v(h1))).
    std::vector<float> datt(static_cast<size_t>(n * Q), 0.0f);
    lora_linear_backward(T.att.data(), L.w[3], pair(il, 3), T.ax[3], dx.data(), n, Q, E, datt.data(), grad_pair(il, 3));
    std::vector<float> dq(static_cast<size_t>(n * Q), 0.0f), dk(static_cast<size_t>(n * KV), 0.0f), dv(dk.size(), 0.0f);
    attention_backward(T.q.data(), T.k.data(), T.v.data(), T.att.data(), T.lse.data(), datt.data(), n, H, KH, hd, scale,
                       dq.data(), dk.data(), dv.data());
    rope(dq.data(), n, H, hd, cfg_.n_rot, cos.data(), sin.data(), cfg_.rope_neox, true);
    rope(dk.data(), n, KH, hd, cfg_.n_rot, cos.data(), sin.data(), cfg_.rope_neox, true);
    std::vector<float> dh1(static_cast<size_t>(n * E), 0.0f);
    lora_linear_backward(T.h1.data(), L.w[0], pair(il, 0), T.ax[0], dq.data(), n, E, Q, dh1.data(), grad_pair(il, 0));
    lora_linear_backward(T.h1.data(), L.w[1], pair(il, 1), T.ax[1], dk.data(), n, E, KV, dh1.data(), grad_pair(il, 1));
    lora_linear_backward(T.h1.data(), L.w[2], pair(il, 2), T.ax[2], dv.data(), n, E, KV, dh1.data(), grad_pair(il, 2));
    rmsnorm_backward(T.x_in.data(), L.attn_norm.data(), T.inv1.data(), dh1.data(), n, E, dx.data(),
                     static_cast<float*>(nullptr));
  }
  if (pass.prompt_grad != nullptr) {  // dx is now the gradient of the input rows
    std::vector<float>& g = *pass.prompt_grad;
    if (g.size() != pass.prompt->size()) g.assign(pass.prompt->size(), 0.0f);
    for (size_t i = 0; i < g.size(); ++i) g[i] += dx[i];
  }
  return loss;
}

double LoraTrainModel::loss_and_grads(std::span<const int32_t> tokens, const LoraAdapter& lora,
                                      LoraAdapter* grads) const {
  TESSERA_CHECK(grads != nullptr, kInvalidArgument, "training: no adapter for the gradients");
  if (grads->layers.size() != lora.layers.size()) grads->layers.resize(lora.layers.size());
  return run({.tokens = tokens, .lora = &lora, .lora_grads = grads});
}

double LoraTrainModel::prompt_loss_and_grads(std::span<const int32_t> tokens, const std::vector<float>& prompt,
                                             std::vector<float>* grad) const {
  TESSERA_CHECK(grad != nullptr, kInvalidArgument, "training: no buffer for the soft prompt's gradient");
  return run({.tokens = tokens, .prompt = &prompt, .prompt_grad = grad});
}

std::vector<float> LoraTrainModel::logits(std::span<const int32_t> tokens, const LoraAdapter* lora,
                                          const std::vector<float>* prompt) const {
  std::vector<float> out;
  run({.tokens = tokens, .lora = lora, .prompt = prompt, .logits = &out});
  return out;
}

}  // namespace tessera::train
