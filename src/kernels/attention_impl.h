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

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/attention_kernels.h"
#include "kernels/kv_codec.h"

namespace tessera::kernels {
namespace {

// ToKvFn with 256-bit F16C / AVX2 (both ISA files): vcvtps2ph rounds to
// nearest even and keeps a NaN quiet with its top payload bits, as
// f32_to_fp16 does; bf16 is f32_to_bf16's integer rounding on 8 lanes. The
// tail goes through the scalar functions.
inline void to_kv_256(KvElem e, const float* src, int32_t n, uint8_t* dst) {
  int32_t i = 0;
  if (e == KvElem::kF32) {
    std::memcpy(dst, src, 4 * static_cast<size_t>(n));
    return;
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    __m128i h;
    if (e == KvElem::kF16) {
      h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m256i u = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                             _mm256_set1_epi32(0x7f800000));
      const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // each lane <= 0xffff
      h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * static_cast<size_t>(i)), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = e == KvElem::kF16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
    std::memcpy(dst + 2 * static_cast<size_t>(i), &h, 2);
  }
}

// One vector of W cache values as f32 (exact for every KV type).
template <class F>
inline typename F::V load_elem(KvElem e, const uint8_t* p) {
  if (e == KvElem::kF16) return F::load_f16(p);
  if (e == KvElem::kBF16) return F::load_bf16(p);
  return F::load(reinterpret_cast<const float*>(p));
}

template <class F>
inline void load_tile_row(KvElem e, const uint8_t* src, float* dst, int n) {
  // n values from storage into f32, n a multiple of F::kW or handled by tail.
  const size_t eb = e == KvElem::kF32 ? 4 : 2;
  int i = 0;
  for (; i + F::kW <= n; i += F::kW) F::store(dst + i, load_elem<F>(e, src + eb * i));
  if (i < n) {
    const int t = n - i;
    typename F::V v;
    if (e == KvElem::kF32) v = F::load_tail(reinterpret_cast<const float*>(src) + i, t);
    else if (e == KvElem::kF16) v = F::load_f16_tail(src + 2 * i, t);
    else v = F::load_bf16_tail(src + 2 * i, t);
    F::store_tail(dst + i, v, t);
  }
}

// max(s[j0], ..., s[n - 1]) (j0 < n), exact in any order; NaN scores are
// skipped unless s[j0] is one, as in a left-to-right scalar loop
// (max_ps keeps its second operand when either is NaN).
template <class F>
inline float range_max(const float* s, int j0, int n) {
  typename F::V mv = F::set1(s[j0]);
  int j = j0;
  for (; j + F::kW <= n; j += F::kW) mv = F::max(F::load(s + j), mv);
  float m = F::hmax(mv);
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

inline float* align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// Where a block's K and V values are read from. Both give the same f32
// values (the conversions are exact), so the arithmetic, and its bits, are
// the same either way.
//   ScratchTiles: the block converted once into f32 tiles (pays off when
//     several query rows share them: prefill chunks, GQA groups);
//   StorageTiles: the cache's own storage, converted at each use (one or two
//     rows: a decode token without GQA reads every value once, and the
//     conversion pass would cost more than it saves).
template <class F>
struct ScratchTiles {
  const float* kt;  // [hd][ks]
  const float* vt;  // [bs_pad][hd]
  int ks, hd;
  typename F::V k(int d, int c) const { return F::load(kt + static_cast<size_t>(d) * ks + c); }
  typename F::V v(int j, int d) const { return F::load(vt + static_cast<size_t>(j) * hd + d); }
};

template <class F>
struct StorageTiles {
  const uint8_t* kb;  // [hd][bs] elements
  const uint8_t* vb;  // [bs][hd] elements
  KvElem e;
  int bs, hd;
  size_t eb;
  typename F::V k(int d, int c) const { return load_elem<F>(e, kb + (static_cast<size_t>(d) * bs + c) * eb); }
  typename F::V v(int j, int d) const { return load_elem<F>(e, vb + (static_cast<size_t>(j) * hd + d) * eb); }
};

// A q8_0 / q4_0 tile read in place (kernels/kv_codec.h): each vector is its
// codes times their scales, one multiply per value, as the scalar codec
// computes them. Needs block_size a multiple of W (a K vector spans W keys'
// scales) and head_dim a multiple of W (a V vector lies in one scale block:
// W <= 32 = qb, or qb = head_dim).
template <class F>
struct QuantTiles {
  const uint8_t* kb;
  const uint8_t* vb;
  const fp16_t* ks;  // [hd / qb][bs]
  const fp16_t* vs;  // [bs][hd / qb]
  bool q4;
  int bs, hd, qb;
  QuantTiles(KvElem e, const uint8_t* k, const uint8_t* v, int bs_, int hd_)
      : kb(k), vb(v), ks(kv_scales(e, k, bs_, hd_)), vs(kv_scales(e, v, bs_, hd_)), q4(e == KvElem::kQ4_0), bs(bs_),
        hd(hd_), qb(kv_quant_block(hd_)) {}
  typename F::V k(int d, int c) const {
    const typename F::V q = q4 ? F::load_q4_pairs(kb + static_cast<size_t>(d) * (bs / 2) + c / 2)
                               : F::load_i8(kb + static_cast<size_t>(d) * bs + c);
    return F::mul(q, F::load_f16(ks + static_cast<size_t>(d / qb) * bs + c));
  }
  typename F::V v(int j, int d) const {
    const typename F::V q = q4 ? F::load_q4_pairs(vb + static_cast<size_t>(j) * (hd / 2) + d / 2)
                               : F::load_i8(vb + static_cast<size_t>(j) * hd + d);
    return F::mul(q, F::set1(_cvtsh_ss(vs[static_cast<size_t>(j) * (hd / qb) + d / qb])));
  }
};

// Scores of NR query rows against one vector of keys (column c of the K
// tile): out[u * out_stride] = scale * q_u . k. Each row's chains are its own.
template <class F, int NR, class Tiles>
static inline void score_rows(const Tiles& t, int c, int hd, const float* const* qs, float scale, float* out,
                              int out_stride) {
  using V = typename F::V;
  V s0[NR], s1[NR];
  for (int u = 0; u < NR; ++u) {
    s0[u] = F::zero();
    s1[u] = F::zero();
  }
  for (int d = 0; d < hd; d += 2) {
    const V k0 = t.k(d, c);
    const V k1 = t.k(d + 1, c);
    for (int u = 0; u < NR; ++u) {
      s0[u] = F::fmadd(F::set1(qs[u][d]), k0, s0[u]);
      s1[u] = F::fmadd(F::set1(qs[u][d + 1]), k1, s1[u]);
    }
  }
  for (int u = 0; u < NR; ++u) {
    F::store(out + static_cast<size_t>(u) * out_stride, F::mul(F::add(s0[u], s1[u]), F::set1(scale)));
  }
}

// Query row r of a unit: head g = r / nq, token i = r % nq.
struct QueryRows {
  const float* q;
  int64_t q_stride;
  int nq, kv_head, group, hd;
  const float* operator()(int r) const {
    return q + static_cast<int64_t>(r % nq) * q_stride + static_cast<int64_t>(kv_head * group + r / nq) * hd;
  }
};

template <class F, class Tiles>
static inline void score_block(const Tiles& t, int bs_pad, int rows, int hd, const QueryRows& q, float scale,
                               float* sc) {
  for (int c = 0; c < bs_pad; c += F::kW) {
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const int nr = rows - r0 < 4 ? rows - r0 : 4;
      const float* qs[4];
      for (int u = 0; u < nr; ++u) qs[u] = q(r0 + u);
      float* out = sc + static_cast<size_t>(r0) * bs_pad + c;
      switch (nr) {
        case 1: score_rows<F, 1>(t, c, hd, qs, scale, out, bs_pad); break;
        case 2: score_rows<F, 2>(t, c, hd, qs, scale, out, bs_pad); break;
        case 3: score_rows<F, 3>(t, c, hd, qs, scale, out, bs_pad); break;
        default: score_rows<F, 4>(t, c, hd, qs, scale, out, bs_pad); break;
      }
    }
  }
}

// ar[0, hd) = ar * corr + sum_{j0 <= j < n_valid} p[j] * V[j], in j order.
template <class F, class Tiles>
static inline void accumulate_v(const Tiles& t, const float* p, int j0, int n_valid, float corr, int hd, float* ar) {
  using V = typename F::V;
  constexpr int W = F::kW;
  const V cv = F::set1(corr);
  for (int d0 = 0; d0 < hd; d0 += 8 * W) {
    const int nv = (hd - d0) / W < 8 ? (hd - d0) / W : 8;
    V o[8];
    for (int u = 0; u < nv; ++u) o[u] = F::mul(F::load(ar + d0 + u * W), cv);
    for (int j = j0; j < n_valid; ++j) {
      const V pj = F::set1(p[j]);
      for (int u = 0; u < nv; ++u) o[u] = F::fmadd(pj, t.v(j, d0 + u * W), o[u]);
    }
    for (int u = 0; u < nv; ++u) F::store(ar + d0 + u * W, o[u]);
  }
}

// One row's online-softmax step over one block whose slots hold the
// positions kp[0, j_end) (the key_pos path): keys the row does not see get
// weight 0 and their V is never read. With kp[j] == j + const, no window and
// every key visible this is the dense path's arithmetic, bit for bit (one
// run of keys; leading zero lanes add +0).
// Returns whether the row sees any key of the block (else nothing changed).
template <class F, class M, class Tiles>
static inline bool mapped_row_update(const Tiles& t, const int32_t* kp, int j_end, int bs_pad, int pos, int window,
                                     int hd, float* s, float& m, float& l, float* ar) {
  using V = typename F::V;
  constexpr int W = F::kW;
  float tile_max = -__builtin_inff();
  bool any = false;
  for (int j = 0; j < j_end; ++j) {
    if (!key_visible(kp[j], pos, window)) continue;
    tile_max = any && tile_max > s[j] ? tile_max : s[j];
    any = true;
  }
  if (!any) return false;
  const float m_new = m > tile_max ? m : tile_max;
  const float corr = m == -__builtin_inff() ? 0.0f : M::exp1(m - m_new);
  const V mv = F::set1(m_new);
  V sum = F::zero();
  for (int c = 0; c < bs_pad; c += W) {
    alignas(64) float tmp[W];
    F::store(tmp, M::exp(F::sub(F::load(s + c), mv)));
    for (int j = 0; j < W; ++j) {
      if (c + j >= j_end || !key_visible(kp[c + j], pos, window)) tmp[j] = 0.0f;
    }
    const V p = F::load(tmp);
    F::store(s + c, p);
    sum = F::add(sum, p);
  }
  l = l * corr + F::hsum(sum);
  m = m_new;
  // V of each run of visible keys, in slot order; the first run rescales.
  float scale = corr;
  for (int j = 0; j < j_end;) {
    if (!key_visible(kp[j], pos, window)) {
      ++j;
      continue;
    }
    int e = j + 1;
    while (e < j_end && key_visible(kp[e], pos, window)) ++e;
    accumulate_v<F>(t, s, j, e, scale, hd, ar);
    scale = 1.0f;
    j = e;
  }
  return true;
}

// Attention mass capture (AttnUnitArgs::key_scores): row r's weights of
// block b's slots [0, j_end), those outside [lo, hi) as 0, relative to mb.
static inline void capture_weights(const AttnUnitArgs& a, int r, int b, int j_end, const float* s, int lo, int hi,
                                   float mb) {
  float* dst = a.key_scores + static_cast<size_t>(r) * a.scores_ld + static_cast<size_t>(b) * a.block_size;
  for (int j = 0; j < j_end; ++j) dst[j] = j >= lo && j < hi ? s[j] : 0.0f;
  a.block_max[static_cast<size_t>(r) * (a.scores_ld / a.block_size) + b] = mb;
}

// Soft-capping of n scores (n a multiple of F::kW), as softcap_score().
template <class F, class M>
static inline void softcap_scores(float* sc, size_t n, float cap) {
  using V = typename F::V;
  const V two_over = F::set1(2.0f / cap), c = F::set1(cap), c2 = F::set1(2.0f * cap), one = F::set1(1.0f);
  for (size_t i = 0; i < n; i += F::kW) {
    const V e = M::exp(F::mul(F::load(sc + i), two_over));
    F::store(sc + i, F::sub(c, F::div(c2, F::add(e, one))));
  }
}

// kExtras: soft-capping or mass capture may be wanted (a.softcap > 0,
// a.key_scores). The plain instantiation has neither branch in its loop.
template <class F, class M, bool kExtras>
void attend_tiled_impl(const AttnUnitArgs& a) {
  using V = typename F::V;
  constexpr int W = F::kW;
  const int bs = a.block_size, hd = a.head_dim;
  const int bs_pad = (bs + 15) / 16 * 16;  // a multiple of W (8 or 16)
  const int rows = a.group * a.nq;         // row r: head g = r / nq, token i = r % nq
  const bool quantized = kv_quantized(a.elem);  // read through the f32 scratch tiles
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
  const QueryRows qp{a.q, a.q_stride, a.nq, a.kv_head, a.group, hd};
  // Read K/V in place when one or two rows use them and a block's tile
  // needs no padding (keys past j_end are then storage, whose scores the
  // softmax below gives weight 0 like the padding's).
  const bool direct = rows <= 2 && bs == bs_pad;
  const bool mapped = a.key_pos != nullptr;
  const int last_key = mapped ? a.n_keys - 1 : a.first_pos + a.nq - 1;
  const int n_blocks = last_key / bs + 1;
  // With a sliding window, blocks wholly before the first row's window hold
  // no key any row of the unit sees: they are not read. (Mapped slots hold
  // positions in any order: every block is read.)
  for (int b = mapped ? 0 : first_key(a.first_pos, a.window) / bs; b < n_blocks; ++b) {
    const size_t base = static_cast<size_t>(a.block_table[b]) * a.block_bytes +
                        static_cast<size_t>(a.kv_head) * a.head_bytes;
    const int j_end = last_key + 1 - b * bs < bs ? last_key + 1 - b * bs : bs;
    if (b + 1 < n_blocks) {
      // Blocks are scattered (paged): the hardware prefetchers lose the
      // stream at every block boundary, and a decode unit does little work
      // per byte. Ask for the next block's K and V tiles now.
      const size_t next = static_cast<size_t>(a.block_table[b + 1]) * a.block_bytes +
                          static_cast<size_t>(a.kv_head) * a.head_bytes;
      for (size_t off = 0; off < a.head_bytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(a.k + next + off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a.v + next + off), _MM_HINT_T0);
      }
    }
    const StorageTiles<F> stored{a.k + base, a.v + base, a.elem, bs, hd, eb};
    const ScratchTiles<F> scratch{kt, vt, bs_pad, hd};
    const QuantTiles<F> quant(a.elem, a.k + base, a.v + base, bs, hd);  // used only when quantized
    // Every read of this block's K / V goes through one of the three.
    const auto with_tiles = [&](const auto& f) {
      if (!direct) return f(scratch);
      if (quantized) return f(quant);
      return f(stored);
    };
    if (direct) {
      with_tiles([&](const auto& t) { score_block<F>(t, bs_pad, rows, hd, qp, a.scale, sc); });
    } else if (quantized) {
      if (bs == bs_pad) {  // vector dequantization: whole vectors of keys
        for (int d = 0; d < hd; ++d) {
          float* row = kt + static_cast<size_t>(d) * bs_pad;
          for (int c = 0; c < bs; c += W) F::store(row + c, quant.k(d, c));
          for (int j = j_end; j < bs_pad; ++j) row[j] = 0.0f;
        }
        for (int j = 0; j < j_end; ++j) {
          for (int d = 0; d < hd; d += W) F::store(vt + static_cast<size_t>(j) * hd + d, quant.v(j, d));
        }
      } else {
        kv_dequant_k(a.elem, a.k + base, bs, hd, j_end, kt, static_cast<size_t>(bs_pad));
        for (int d = 0; d < hd; ++d) {
          for (int j = j_end; j < bs_pad; ++j) kt[static_cast<size_t>(d) * bs_pad + j] = 0.0f;
        }
        kv_dequant_v(a.elem, a.v + base, bs, hd, j_end, vt);
      }
      score_block<F>(scratch, bs_pad, rows, hd, qp, a.scale, sc);
    } else {
      // K tile: feature d of keys [0, j_end) is contiguous in storage.
      for (int d = 0; d < hd; ++d) {
        float* row = kt + static_cast<size_t>(d) * bs_pad;
        load_tile_row<F>(a.elem, a.k + base + static_cast<size_t>(d) * bs * eb, row, j_end);
        for (int j = j_end; j < bs_pad; ++j) row[j] = 0.0f;
      }
      for (int j = 0; j < j_end; ++j) {
        load_tile_row<F>(a.elem, a.v + base + static_cast<size_t>(j) * hd * eb, vt + static_cast<size_t>(j) * hd, hd);
      }
      score_block<F>(scratch, bs_pad, rows, hd, qp, a.scale, sc);
    }
    if (kExtras && a.softcap > 0.0f) softcap_scores<F, M>(sc, static_cast<size_t>(rows) * bs_pad, a.softcap);
    // Online softmax and the weighted sum of V, row by row.
    for (int r = 0; r < rows; ++r) {
      const int pos = a.first_pos + r % a.nq;
      if (mapped) {
        float* s = sc + static_cast<size_t>(r) * bs_pad;
        float* ar = acc + static_cast<size_t>(r) * hd;
        const int32_t* kp = a.key_pos + static_cast<size_t>(b) * bs;
        const bool seen = with_tiles([&](const auto& t) {
          return mapped_row_update<F, M>(t, kp, j_end, bs_pad, pos, a.window, hd, s, m[r], l[r], ar);
        });
        if (kExtras && seen && a.key_scores != nullptr) capture_weights(a, r, b, j_end, s, 0, j_end, m[r]);
        continue;
      }
      const int n_valid = pos + 1 - b * bs < j_end ? pos + 1 - b * bs : j_end;
      // Keys [j0, n_valid) of this block are in the row's window.
      const int j0 = first_key(pos, a.window) - b * bs > 0 ? first_key(pos, a.window) - b * bs : 0;
      if (n_valid <= j0) continue;
      float* s = sc + static_cast<size_t>(r) * bs_pad;
      const float tile_max = range_max<F>(s, j0, n_valid);
      const float m_new = m[r] > tile_max ? m[r] : tile_max;
      const float corr = m[r] == -__builtin_inff() ? 0.0f : M::exp1(m[r] - m_new);
      const V mv = F::set1(m_new);
      V sum = F::zero();
      for (int c = j0 - j0 % W; c < bs_pad; c += W) {
        V p = M::exp(F::sub(F::load(s + c), mv));
        if (c + W > n_valid || c < j0) {
          // Keys past n_valid (masked or padding) and before j0 (out of
          // the window) get weight 0.
          alignas(64) float tmp[W];
          F::store(tmp, p);
          for (int j = 0; j < W; ++j) {
            if (c + j < j0 || c + j >= n_valid) tmp[j] = 0.0f;
          }
          p = F::load(tmp);
        }
        F::store(s + c, p);
        sum = F::add(sum, p);
      }
      l[r] = l[r] * corr + F::hsum(sum);
      m[r] = m_new;
      if (kExtras && a.key_scores != nullptr) capture_weights(a, r, b, j_end, s, j0, n_valid, m_new);
      float* ar = acc + static_cast<size_t>(r) * hd;
      with_tiles([&](const auto& t) { accumulate_v<F>(t, s, j0, n_valid, corr, hd, ar); });
    }
  }
  // Attention sinks: each row's sink joins its max and sum; its weighted sum
  // of V is rescaled to the new max in the output multiply (as the reference).
  float* f = l + rows;  // [rows] (attention_scratch_floats)
  for (int r = 0; r < rows; ++r) f[r] = a.sinks != nullptr ? add_sink(row_sink(a, r), m[r], l[r]) : 1.0f;
  if (kExtras && a.row_stats != nullptr) {
    for (int r = 0; r < rows; ++r) {
      a.row_stats[2 * r] = m[r];
      a.row_stats[2 * r + 1] = l[r];
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* o = a.out + static_cast<int64_t>(r % a.nq) * a.out_stride +
               static_cast<int64_t>(a.kv_head * a.group + r / a.nq) * hd;
    const float* ar = acc + static_cast<size_t>(r) * hd;
    if (a.sinks != nullptr) {
      // (acc * f) / l, as the reference divides: one rounding per step.
      const V fv = F::set1(f[r]), lv = F::set1(l[r]);
      for (int d = 0; d < hd; d += W) F::store(o + d, F::div(F::mul(F::load(ar + d), fv), lv));
      continue;
    }
    const V inv = F::set1(1.0f / l[r]);
    for (int d = 0; d < hd; d += W) F::store(o + d, F::mul(F::load(ar + d), inv));
  }
}

template <class F, class M>
void attend_tiled(const AttnUnitArgs& a) {
  if (a.softcap > 0.0f || a.key_scores != nullptr) return attend_tiled_impl<F, M, true>(a);
  attend_tiled_impl<F, M, false>(a);
}

}  // namespace
}  // namespace tessera::kernels
