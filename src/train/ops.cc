#include "train/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tessera::train {

template <class T>
void linear(const T* x, const T* w, int64_t n, int64_t in, int64_t out, T* y) {
  for (int64_t t = 0; t < n; ++t) {
    const T* xr = x + t * in;
    for (int64_t o = 0; o < out; ++o) {
      const T* wr = w + o * in;
      T acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += xr[i] * wr[i];
      y[t * out + o] = acc;
    }
  }
}

template <class T>
void linear_backward(const T* x, const T* w, const T* dy, int64_t n, int64_t in, int64_t out, T* dx, T* dw) {
  for (int64_t t = 0; t < n; ++t) {
    const T* g = dy + t * out;
    for (int64_t o = 0; o < out; ++o) {
      const T go = g[o];
      if (dx != nullptr) {
        const T* wr = w + o * in;
        T* dxr = dx + t * in;
        for (int64_t i = 0; i < in; ++i) dxr[i] += go * wr[i];
      }
      if (dw != nullptr) {
        const T* xr = x + t * in;
        T* dwr = dw + o * in;
        for (int64_t i = 0; i < in; ++i) dwr[i] += go * xr[i];
      }
    }
  }
}

template <class T>
void rmsnorm(const T* x, const T* g, int64_t n, int64_t d, T eps, T* y, T* inv_rms) {
  for (int64_t t = 0; t < n; ++t) {
    const T* xr = x + t * d;
    T ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const T r = T(1) / std::sqrt(ss / static_cast<T>(d) + eps);
    inv_rms[t] = r;
    for (int64_t i = 0; i < d; ++i) y[t * d + i] = xr[i] * r * g[i];
  }
}

// y_i = x_i r g_i with r = (mean(x²) + eps)^(-1/2), dr/dx_j = -r³ x_j / d:
// dx_j = r g_j dy_j - x_j r³ / d * sum_i dy_i g_i x_i.
template <class T>
void rmsnorm_backward(const T* x, const T* g, const T* inv_rms, const T* dy, int64_t n, int64_t d, T* dx, T* dg) {
  for (int64_t t = 0; t < n; ++t) {
    const T* xr = x + t * d;
    const T* gy = dy + t * d;
    const T r = inv_rms[t];
    T dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += gy[i] * g[i] * xr[i];
    const T c = dot * r * r * r / static_cast<T>(d);
    for (int64_t i = 0; i < d; ++i) {
      if (dx != nullptr) dx[t * d + i] += r * g[i] * gy[i] - xr[i] * c;
      if (dg != nullptr) dg[i] += gy[i] * xr[i] * r;
    }
  }
}

template <class T>
void rope(T* x, int64_t n, int64_t heads, int64_t head_dim, int64_t n_rot, const T* cos, const T* sin, bool neox,
          bool inverse) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      T* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        T& a = v[neox ? i : 2 * i];
        T& b = v[neox ? i + half : 2 * i + 1];
        const T si = inverse ? -s[i] : s[i];
        const T a0 = a, b0 = b;
        a = a0 * c[i] - b0 * si;
        b = a0 * si + b0 * c[i];
      }
    }
  }
}

template <class T>
void swiglu(const T* g, const T* u, int64_t n, T* h) {
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
}

// silu'(g) = σ(g) (1 + g (1 - σ(g))).
template <class T>
void swiglu_backward(const T* g, const T* u, const T* dh, int64_t n, T* dg, T* du) {
  for (int64_t i = 0; i < n; ++i) {
    const T sig = T(1) / (T(1) + std::exp(-g[i]));
    if (du != nullptr) du[i] += dh[i] * g[i] * sig;
    if (dg != nullptr) dg[i] += dh[i] * u[i] * sig * (T(1) + g[i] * (T(1) - sig));
  }
}

namespace {

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

template <class T>
void attention(const T* q, const T* k, const T* v, int64_t n, int64_t heads, int64_t kv_heads, int64_t hd, T scale,
               T* o, T* lse) {
  const int64_t group = heads / kv_heads;
  std::vector<T> s(static_cast<size_t>(n));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kh = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const T* qi = q + (i * heads + h) * hd;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        s[static_cast<size_t>(j)] = scale * dot(qi, k + (j * kv_heads + kh) * hd, hd);
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      T sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<size_t>(j)] - m);
      const T l = m + std::log(sum);
      lse[h * n + i] = l;
      T* oi = o + (i * heads + h) * hd;
      std::fill(oi, oi + hd, T(0));
      for (int64_t j = 0; j <= i; ++j) {
        const T p = std::exp(s[static_cast<size_t>(j)] - l);
        const T* vj = v + (j * kv_heads + kh) * hd;
        for (int64_t e = 0; e < hd; ++e) oi[e] += p * vj[e];
      }
    }
  }
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const T* lse, const T* d_o, int64_t n,
                        int64_t heads, int64_t kv_heads, int64_t hd, T scale, T* dq, T* dk, T* dv) {
  const int64_t group = heads / kv_heads;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kh = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const T* qi = q + (i * heads + h) * hd;
      const T* doi = d_o + (i * heads + h) * hd;
      const T big_d = dot(doi, o + (i * heads + h) * hd, hd);
      T* dqi = dq + (i * heads + h) * hd;
      for (int64_t j = 0; j <= i; ++j) {
        const T* kj = k + (j * kv_heads + kh) * hd;
        const T* vj = v + (j * kv_heads + kh) * hd;
        const T p = std::exp(scale * dot(qi, kj, hd) - lse[h * n + i]);
        T* dvj = dv + (j * kv_heads + kh) * hd;
        for (int64_t e = 0; e < hd; ++e) dvj[e] += p * doi[e];
        const T ds = p * (dot(doi, vj, hd) - big_d) * scale;
        T* dkj = dk + (j * kv_heads + kh) * hd;
        for (int64_t e = 0; e < hd; ++e) {
          dqi[e] += ds * kj[e];
          dkj[e] += ds * qi[e];
        }
      }
    }
  }
}

template <class T>
T cross_entropy(const T* logits, int64_t n, int64_t vocab, const int32_t* targets, T* dlogits) {
  int64_t count = 0;
  for (int64_t t = 0; t < n; ++t) count += targets[t] >= 0;
  if (dlogits != nullptr) std::fill(dlogits, dlogits + n * vocab, T(0));
  if (count == 0) return 0;
  T loss = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (targets[t] < 0) continue;
    const T* z = logits + t * vocab;
    const T m = *std::max_element(z, z + vocab);
    T sum = 0;
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(z[c] - m);
    const T l = m + std::log(sum);
    loss += l - z[targets[t]];
    if (dlogits != nullptr) {
      T* dz = dlogits + t * vocab;
      for (int64_t c = 0; c < vocab; ++c) dz[c] = std::exp(z[c] - l) / static_cast<T>(count);
      dz[targets[t]] -= T(1) / static_cast<T>(count);
    }
  }
  return loss / static_cast<T>(count);
}

void adamw_step(float* p, const float* grad, float* m, float* v, int64_t n, const AdamW& opt, int64_t step) {
  const double c1 = 1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(step));
  const double c2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(step));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = opt.beta1 * m[i] + (1.0f - opt.beta1) * grad[i];
    v[i] = opt.beta2 * v[i] + (1.0f - opt.beta2) * grad[i] * grad[i];
    const double mh = m[i] / c1, vh = v[i] / c2;
    p[i] = static_cast<float>(p[i] - opt.lr * (mh / (std::sqrt(vh) + opt.eps) + opt.weight_decay * p[i]));
  }
}

#define TESSERA_TRAIN_OPS(T)                                                                                       \
  template void linear<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);                                     \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, T*);              \
  template void rmsnorm<T>(const T*, const T*, int64_t, int64_t, T, T*, T*);                                      \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);            \
  template void rope<T>(T*, int64_t, int64_t, int64_t, int64_t, const T*, const T*, bool, bool);                  \
  template void swiglu<T>(const T*, const T*, int64_t, T*);                                                       \
  template void swiglu_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);                                \
  template void attention<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, T, T*, T*);        \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                      int64_t, int64_t, T, T*, T*, T*);                                            \
  template T cross_entropy<T>(const T*, int64_t, int64_t, const int32_t*, T*);

TESSERA_TRAIN_OPS(float)
TESSERA_TRAIN_OPS(double)

}  // namespace tessera::train
