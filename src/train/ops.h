// The operations a decoder's training step runs, forward and backward, as
// plain row-major loops over a float type T (float for training, double
// for the finite-difference gradient checks in tests/train_ops_test.cc).
// These are the scalar references of fine-tuning (issue 41): each backward
// is written from the forward's derivative, never from another library.
//
// Shapes: n rows (tokens) of d values; weights [out][in] as in GGUF (a
// linear is y = x Wᵀ). A backward adds its gradients into the outputs it
// is given (+=, so gradients of shared inputs accumulate) and skips a null
// one (a frozen weight has no gradient).
#pragma once

#include <cstdint>

namespace tessera::train {

// y[t][o] = sum_i x[t][i] w[o][i]
template <class T>
void linear(const T* x, const T* w, int64_t n, int64_t in, int64_t out, T* y);
// dx[t][i] += sum_o dy[t][o] w[o][i];  dw[o][i] += sum_t dy[t][o] x[t][i]
template <class T>
void linear_backward(const T* x, const T* w, const T* dy, int64_t n, int64_t in, int64_t out, T* dx, T* dw);

// y = x / sqrt(mean(x²) + eps) * g, per row; inv_rms[t] kept for the backward.
template <class T>
void rmsnorm(const T* x, const T* g, int64_t n, int64_t d, T eps, T* y, T* inv_rms);
template <class T>
void rmsnorm_backward(const T* x, const T* g, const T* inv_rms, const T* dy, int64_t n, int64_t d, T* dx, T* dg);

// Rotary embedding of x [n][heads][head_dim] in place: the first n_rot
// dims of each head turn by the angles of its token (cos, sin: [n][n_rot /
// 2], kernels::rope_angles of the token's position). neox pairs (i, i +
// n_rot/2), else (2i, 2i + 1). The backward is the inverse rotation of dy
// (a rotation's transpose): inverse = true.
template <class T>
void rope(T* x, int64_t n, int64_t heads, int64_t head_dim, int64_t n_rot, const T* cos, const T* sin, bool neox,
          bool inverse);

// h = silu(g) * u, silu(g) = g / (1 + exp(-g)).
template <class T>
void swiglu(const T* g, const T* u, int64_t n, T* h);
template <class T>
void swiglu_backward(const T* g, const T* u, const T* dh, int64_t n, T* dg, T* du);

// Causal attention of n tokens of one sequence: q [n][heads][hd], k and v
// [n][kv_heads][hd] (head h reads kv head h / (heads / kv_heads)), o like
// q; lse [heads][n] keeps each row's log-sum-exp. The backward recomputes
// the probabilities row by row from q, k and lse (FlashAttention's
// backward: memory O(n) per head, not O(n²)), with D = rowsum(do ∘ o).
template <class T>
void attention(const T* q, const T* k, const T* v, int64_t n, int64_t heads, int64_t kv_heads, int64_t hd, T scale,
               T* o, T* lse);
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const T* lse, const T* d_o, int64_t n,
                        int64_t heads, int64_t kv_heads, int64_t hd, T scale, T* dq, T* dk, T* dv);

// Mean over the rows with a target (targets[t] >= 0) of -log softmax(
// logits[t])[targets[t]]; dlogits (if not null) = its gradient (softmax -
// one-hot, over the counted rows' number), written, not added. Returns 0
// with no target.
template <class T>
T cross_entropy(const T* logits, int64_t n, int64_t vocab, const int32_t* targets, T* dlogits);

// One AdamW step (Loshchilov & Hutter) on n parameters at step `step`
// (from 1): m, v the moments; decoupled weight decay.
struct AdamW {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};
void adamw_step(float* p, const float* grad, float* m, float* v, int64_t n, const AdamW& opt, int64_t step);

}  // namespace tessera::train
