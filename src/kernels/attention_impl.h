// The tiled paged-attention kernel, written once over vector traits (F:
// Avx2F / Avx512F from simd_*.h, M: the ISA's exp). Included only by
// attention_avx2.cc and attention_avx512.cc; internal linkage throughout
// (see docs/KERNELS.md, "ODR rule").
//
// Tile layout (kernels/attention.h): a (block, head) tile of K is
// [head_dim][block_size] (keys in the inner dimension, so one vector holds
// one feature of W consecutive keys and q.K needs no horizontal sums), and
// of V is [block_size][head_dim] (the weighted sum runs along head_dim).
//
// Invariance: every query row is computed with the same sequence of
// operations whatever other rows share its unit (rows are independent
// lanes of work; the key order, the even/odd split of the q.k sum, and the
// block order are fixed), so chunked-prefill boundaries and batch
// composition never change a row's result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention_kernels.h"

namespace tessera::kernels {
namespace {

template <class F>
inline void load_tile_row(KvElem e, const uint8_t* src, float* dst, int n) {
  // n values from storage into f32, n a multiple of F::kW or handled by tail.
  int i = 0;
  for (; i + F::kW <= n; i += F::kW) {
    typename F::V v;
    if (e == KvElem::kF32) v = F::load(reinterpret_cast<const float*>(src) + i);
    else if (e == KvElem::kF16) v = F::load_f16(src + 2 * i);
    else v = F::load_bf16(src + 2 * i);
    F::store(dst + i, v);
  }
  if (i < n) {
    const int t = n - i;
    typename F::V v;
    if (e == KvElem::kF32) v = F::load_tail(reinterpret_cast<const float*>(src) + i, t);
    else if (e == KvElem::kF16) v = F::load_f16_tail(src + 2 * i, t);
    else v = F::load_bf16_tail(src + 2 * i, t);
    F::store_tail(dst + i, v, t);
  }
}

inline float* align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

template <class F, class M>
void attend_tiled(const AttnUnitArgs& a) {
  using V = typename F::V;
  constexpr int W = F::kW;
  const int bs = a.block_size, hd = a.head_dim;
  const int bs_pad = (bs + 15) / 16 * 16;  // a multiple of W (8 or 16)
  const int rows = a.group * a.nq;         // row r: head g = r / nq, token i = r % nq
  const size_t eb = a.elem == KvElem::kF32 ? 4 : 2;
  float* kt = align64(a.scratch);                       // [hd][bs_pad]
  float* vt = kt + static_cast<size_t>(hd) * bs_pad;    // [bs_pad][hd]
  float* sc = vt + static_cast<size_t>(bs_pad) * hd;    // [rows][bs_pad]
  float* acc = sc + static_cast<size_t>(rows) * bs_pad; // [rows][hd]
  float* m = acc + static_cast<size_t>(rows) * hd;
  float* l = m + rows;
  for (int i = 0; i < rows * hd; ++i) acc[i] = 0.0f;
  for (int r = 0; r < rows; ++r) {
    m[r] = -__builtin_inff();
    l[r] = 0.0f;
  }
  auto q_row = [&](int r) {
    return a.q + static_cast<int64_t>(r % a.nq) * a.q_stride +
           static_cast<int64_t>(a.kv_head * a.group + r / a.nq) * hd;
  };
  const int last_key = a.first_pos + a.nq - 1;
  const int n_blocks = last_key / bs + 1;
  for (int b = 0; b < n_blocks; ++b) {
    const size_t base = static_cast<size_t>(a.block_table[b]) * a.block_bytes +
                        static_cast<size_t>(a.kv_head) * a.head_bytes;
    const int j_end = last_key + 1 - b * bs < bs ? last_key + 1 - b * bs : bs;
    // K tile: feature d of keys [0, j_end) is contiguous in storage.
    for (int d = 0; d < hd; ++d) {
      float* row = kt + static_cast<size_t>(d) * bs_pad;
      load_tile_row<F>(a.elem, a.k + base + static_cast<size_t>(d) * bs * eb, row, j_end);
      for (int j = j_end; j < bs_pad; ++j) row[j] = 0.0f;
    }
    for (int j = 0; j < j_end; ++j) {
      load_tile_row<F>(a.elem, a.v + base + static_cast<size_t>(j) * hd * eb, vt + static_cast<size_t>(j) * hd, hd);
    }
    // Scores, 4 rows x one vector of keys at a time, q.k split into even
    // and odd features (two independent FMA chains per row).
    for (int c = 0; c < bs_pad; c += W) {
      for (int r0 = 0; r0 < rows; r0 += 4) {
        const int nr = rows - r0 < 4 ? rows - r0 : 4;
        V s0[4], s1[4];
        const float* qs[4];
        for (int u = 0; u < 4; ++u) {
          s0[u] = F::zero();
          s1[u] = F::zero();
          qs[u] = q_row(r0 + (u < nr ? u : 0));
        }
        for (int d = 0; d < hd; d += 2) {
          const V k0 = F::load(kt + static_cast<size_t>(d) * bs_pad + c);
          const V k1 = F::load(kt + static_cast<size_t>(d + 1) * bs_pad + c);
          for (int u = 0; u < 4; ++u) {
            s0[u] = F::fmadd(F::set1(qs[u][d]), k0, s0[u]);
            s1[u] = F::fmadd(F::set1(qs[u][d + 1]), k1, s1[u]);
          }
        }
        for (int u = 0; u < nr; ++u) {
          F::store(sc + static_cast<size_t>(r0 + u) * bs_pad + c, F::mul(F::add(s0[u], s1[u]), F::set1(a.scale)));
        }
      }
    }
    // Online softmax and the weighted sum of V, row by row.
    for (int r = 0; r < rows; ++r) {
      const int pos = a.first_pos + r % a.nq;
      const int n_valid = pos + 1 - b * bs < j_end ? pos + 1 - b * bs : j_end;
      if (n_valid <= 0) continue;
      float* s = sc + static_cast<size_t>(r) * bs_pad;
      float tile_max = s[0];
      for (int j = 1; j < n_valid; ++j) tile_max = s[j] > tile_max ? s[j] : tile_max;
      const float m_new = m[r] > tile_max ? m[r] : tile_max;
      const float corr = m[r] == -__builtin_inff() ? 0.0f : M::exp1(m[r] - m_new);
      const V mv = F::set1(m_new);
      V sum = F::zero();
      for (int c = 0; c < bs_pad; c += W) {
        V p = M::exp(F::sub(F::load(s + c), mv));
        if (c + W > n_valid) {
          // Keys past n_valid (masked or padding) get weight 0.
          alignas(64) float tmp[W];
          F::store(tmp, p);
          for (int j = (n_valid > c ? n_valid - c : 0); j < W; ++j) tmp[j] = 0.0f;
          p = F::load(tmp);
        }
        F::store(s + c, p);
        sum = F::add(sum, p);
      }
      l[r] = l[r] * corr + F::hsum(sum);
      m[r] = m_new;
      float* ar = acc + static_cast<size_t>(r) * hd;
      const V cv = F::set1(corr);
      for (int d0 = 0; d0 < hd; d0 += 8 * W) {
        const int nv = (hd - d0) / W < 8 ? (hd - d0) / W : 8;
        V o[8];
        for (int u = 0; u < nv; ++u) o[u] = F::mul(F::load(ar + d0 + u * W), cv);
        for (int j = 0; j < n_valid; ++j) {
          const V pj = F::set1(s[j]);
          const float* vj = vt + static_cast<size_t>(j) * hd + d0;
          for (int u = 0; u < nv; ++u) o[u] = F::fmadd(pj, F::load(vj + u * W), o[u]);
        }
        for (int u = 0; u < nv; ++u) F::store(ar + d0 + u * W, o[u]);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* o = a.out + static_cast<int64_t>(r % a.nq) * a.out_stride +
               static_cast<int64_t>(a.kv_head * a.group + r / a.nq) * hd;
    const V inv = F::set1(1.0f / l[r]);
    const float* ar = acc + static_cast<size_t>(r) * hd;
    for (int d = 0; d < hd; d += W) F::store(o + d, F::mul(F::load(ar + d), inv));
  }
}

}  // namespace
}  // namespace tessera::kernels
