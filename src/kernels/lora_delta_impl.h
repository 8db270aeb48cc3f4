// The LoRA delta kernels (lora_delta_kernels.h), written once over the float
// traits F (Avx2F, Avx512F) and a tile configuration Cfg, instantiated by
// lora_delta_avx2.cc / lora_delta_avx512.cc. Internal linkage only (ODR
// rule, docs/KERNELS.md).
//
// Both products are register tiles of up to 4 tokens, so a prefill segment
// (SGMV) loads each weight vector once per tile of tokens:
//  * shrink: TT tokens x R ranks of accumulators; per step along `in`, R
//    vectors of A and one of each token's x feed TT * R fused multiply-adds.
//  * expand: TT tokens x C vectors along `out`; per rank k, C vectors of
//    B[k, :] and one broadcast of each token's ax[k] feed TT * C. With many
//    tokens B is first copied a panel of columns at a time into an L1
//    buffer (lora_expand_v).
// A decode token (BGMV: n = 1) gets the widest tile in the other dimension
// (8 ranks, 8 vectors of out), enough independent chains to keep the FMA
// units busy while weights stream in. Leftover ranks (vectors of out) go to
// narrower tiles (halving the width down to 1, then a masked last vector).
// Every tile computes an output with the same operations
// (lora_delta_kernels.h), so results never depend on n or on which tile a
// token fell into. Weights are read through a reader W per storage type
// (LoraRead): F32, F16 or Q8_0 lanes become the floats they stand for.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"
#include "kernels/lora_delta_kernels.h"

namespace tessera::kernels {
namespace {

static inline int64_t lora_row_of(const int32_t* rows, int64_t i) { return rows != nullptr ? rows[i] : i; }

// Lanes [0, m) of p: a whole vector, or the first m with zeros after them.
template <class F, bool kPartial>
static inline typename F::V lora_load(const float* p, int m) {
  if constexpr (kPartial) {
    return F::load_tail(p, m);
  } else {
    return F::load(p);
  }
}

// Lanes [0, m) of row k, columns j.., of a [*][n] matrix stored in T
// (kPartial: the first m lanes, zeros after; only F32 and F16 rows have
// partial vectors: a Q8_0 row is whole blocks of 32, a multiple of kW).
template <class F, LoraWeightType T>
struct LoraRead {
  template <bool kPartial>
  static typename F::V load(const void* w, int64_t n, int64_t k, int64_t j, int m) {
    if constexpr (T == LoraWeightType::kF32) {
      return lora_load<F, kPartial>(static_cast<const float*>(w) + k * n + j, m);
    } else if constexpr (T == LoraWeightType::kF16) {
      const fp16_t* h = static_cast<const fp16_t*>(w) + k * n + j;
      if constexpr (kPartial) {
        return F::load_f16_tail(h, m);
      } else {
        return F::load_f16(h);
      }
    } else {
      return F::mul(codes(w, n, k, j), F::set1(scale(w, n, k, j)));
    }
  }
  // Q8_0 only: the codes q of the vector at (k, j) as floats, and the
  // scale d of its block (value = d * q): a tile that reads several vectors
  // of one block converts its scale once.
  static const BlockQ8_0& block(const void* w, int64_t n, int64_t k, int64_t j) {
    static_assert(T == LoraWeightType::kQ8_0 && kQK % F::kW == 0);
    return static_cast<const BlockQ8_0*>(w)[k * (n / kQK) + j / kQK];
  }
  static typename F::V codes(const void* w, int64_t n, int64_t k, int64_t j) {
    return F::load_i8(block(w, n, k, j).qs + j % kQK);
  }
  static float scale(const void* w, int64_t n, int64_t k, int64_t j) { return _cvtsh_ss(block(w, n, k, j).d); }
};

template <class W>
constexpr bool kLoraQ8 = false;
template <class F>
constexpr bool kLoraQ8<LoraRead<F, LoraWeightType::kQ8_0>> = true;

// ax[i0 + t][k0 + r] for t < TT, r < R (xr: the TT tokens' rows of x).
template <class F, class W, int TT, int R>
static void lora_shrink_tile(const LoraShrinkArgs& p, const float* const* xr, int64_t i0, int64_t k0) {
  using V = typename F::V;
  V acc[TT][R];
  for (int t = 0; t < TT; ++t) {
    for (int r = 0; r < R; ++r) acc[t][r] = F::zero();
  }
  float ds[R] = {};  // Q8_0: the rows' scales in the current block (set at j = 0)
  auto step = [&]<bool kPartial>(int64_t j, int m) {
    V av[R];
    if constexpr (kLoraQ8<W>) {
      if (j % kQK == 0) {
        for (int r = 0; r < R; ++r) ds[r] = W::scale(p.a, p.in, k0 + r, j);
      }
      for (int r = 0; r < R; ++r) av[r] = F::mul(W::codes(p.a, p.in, k0 + r, j), F::set1(ds[r]));
    } else {
      for (int r = 0; r < R; ++r) av[r] = W::template load<kPartial>(p.a, p.in, k0 + r, j, m);
    }
    for (int t = 0; t < TT; ++t) {
      const V xv = lora_load<F, kPartial>(xr[t] + j, m);
      for (int r = 0; r < R; ++r) acc[t][r] = F::fmadd(av[r], xv, acc[t][r]);
    }
  };
  int64_t j = 0;
  for (; j + F::kW <= p.in; j += F::kW) step.template operator()<false>(j, F::kW);
  if constexpr (!kLoraQ8<W>) {
    if (j < p.in) step.template operator()<true>(j, static_cast<int>(p.in - j));
  }
  for (int t = 0; t < TT; ++t) {
    float* ax = p.ax + (i0 + t) * p.rank + k0;
    for (int r = 0; r < R; ++r) ax[r] = F::hsum(acc[t][r]) * p.scale;
  }
}

// Ranks [k, rank) of tokens i0..i0+TT-1, R at a time, the rest by narrower tiles.
template <class F, class W, int TT, int R>
static void lora_shrink_ranks(const LoraShrinkArgs& p, const float* const* xr, int64_t i0, int64_t k) {
  for (; k + R <= p.rank; k += R) lora_shrink_tile<F, W, TT, R>(p, xr, i0, k);
  if constexpr (R > 1) {
    if (k < p.rank) lora_shrink_ranks<F, W, TT, R / 2>(p, xr, i0, k);
  }
}

// Columns [o0, o1) of B, column o of rank k at column o - o0 of row k of a
// [rank][stride] matrix read by W: B itself (stride out, o0 0) or a packed
// F32 copy of those columns.
struct LoraPanel {
  const void* b;
  int64_t stride, o0, o1;
};

// y[row, o..] += acc for C vectors along out from o; with kPartial, C = 1
// and only the first m lanes exist.
template <class F, class W, int TT, int C, bool kPartial>
static void lora_expand_tile(const LoraPanel& pn, int64_t rank, float* const* yr, const float* ax, int64_t o, int m) {
  using V = typename F::V;
  static_assert(!kPartial || C == 1);
  V acc[TT][C];
  for (int t = 0; t < TT; ++t) {
    for (int c = 0; c < C; ++c) acc[t][c] = F::zero();
  }
  for (int64_t k = 0; k < rank; ++k) {
    V bv[C];
    if constexpr (kLoraQ8<W> && C * F::kW >= kQK) {  // whole blocks (o is a multiple of C * kW here)
      constexpr int kPerBlock = kQK / F::kW;
      for (int c0 = 0; c0 < C; c0 += kPerBlock) {
        const V d = F::set1(W::scale(pn.b, pn.stride, k, o - pn.o0 + c0 * F::kW));
        for (int c = c0; c < c0 + kPerBlock; ++c) bv[c] = F::mul(W::codes(pn.b, pn.stride, k, o - pn.o0 + c * F::kW), d);
      }
    } else {
      for (int c = 0; c < C; ++c) bv[c] = W::template load<kPartial>(pn.b, pn.stride, k, o - pn.o0 + c * F::kW, m);
    }
    for (int t = 0; t < TT; ++t) {
      const V s = F::set1(ax[t * rank + k]);
      for (int c = 0; c < C; ++c) acc[t][c] = F::fmadd(s, bv[c], acc[t][c]);
    }
  }
  for (int t = 0; t < TT; ++t) {
    for (int c = 0; c < C; ++c) {
      float* y = yr[t] + o + c * F::kW;
      const V sum = F::add(lora_load<F, kPartial>(y, m), acc[t][c]);
      if constexpr (kPartial) {
        F::store_tail(y, sum, m);
      } else {
        F::store(y, sum);
      }
    }
  }
}

// Outputs [o, pn.o1) of tokens i0..i0+TT-1, C vectors at a time, the rest by
// narrower tiles and a masked last vector.
template <class F, class W, int TT, int C>
static void lora_expand_cols(const LoraPanel& pn, int64_t rank, float* const* yr, const float* ax, int64_t o) {
  for (; o + C * F::kW <= pn.o1; o += C * F::kW) lora_expand_tile<F, W, TT, C, false>(pn, rank, yr, ax, o, F::kW);
  if constexpr (C > 1) {
    if (o < pn.o1) lora_expand_cols<F, W, TT, C / 2>(pn, rank, yr, ax, o);
  } else if constexpr (!kLoraQ8<W>) {
    if (o < pn.o1) lora_expand_tile<F, W, TT, 1, true>(pn, rank, yr, ax, o, static_cast<int>(pn.o1 - o));
  }
}

template <class F, class Cfg, class W, int TT>
static void lora_shrink_tokens(const LoraShrinkArgs& p, int64_t i0) {
  const float* xr[TT];
  for (int t = 0; t < TT; ++t) xr[t] = p.x + lora_row_of(p.rows, i0 + t) * p.x_stride;
  lora_shrink_ranks<F, W, TT, Cfg::kShrinkRanks[TT]>(p, xr, i0, 0);
}

template <class F, class Cfg, class W, int TT>
static void lora_expand_tokens(const LoraExpandArgs& p, const LoraPanel& pn, int64_t i0) {
  float* yr[TT];
  for (int t = 0; t < TT; ++t) yr[t] = p.y + lora_row_of(p.rows, i0 + t) * p.y_stride;
  lora_expand_cols<F, W, TT, Cfg::kExpandVectors[TT]>(pn, p.rank, yr, p.ax + i0 * p.rank, pn.o0);
}

// tiles.operator()<TT>(i0) over whole tiles of 4 tokens, then one tile of
// the 1..3 left.
template <class Tiles>
static inline void lora_token_tiles(int64_t n, Tiles tiles) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) tiles.template operator()<4>(i);
  switch (n - i) {
    case 1: tiles.template operator()<1>(i); break;
    case 2: tiles.template operator()<2>(i); break;
    case 3: tiles.template operator()<3>(i); break;
    default: break;
  }
}

template <class F, class Cfg, LoraWeightType T>
static void lora_shrink_typed(const LoraShrinkArgs& p) {
  using W = LoraRead<F, T>;
  lora_token_tiles(p.n, [&p]<int TT>(int64_t i) { lora_shrink_tokens<F, Cfg, W, TT>(p, i); });
}

template <class F, class Cfg>
static void lora_shrink_v(const LoraShrinkArgs& p) {
  switch (p.type) {
    case LoraWeightType::kF32: return lora_shrink_typed<F, Cfg, LoraWeightType::kF32>(p);
    case LoraWeightType::kF16: return lora_shrink_typed<F, Cfg, LoraWeightType::kF16>(p);
    case LoraWeightType::kQ8_0: return lora_shrink_typed<F, Cfg, LoraWeightType::kQ8_0>(p);
  }
}

// Floats of the packed B panel (on the stack, in L1 while the tokens sweep it).
constexpr int64_t kLoraPanelFloats = 4096;

// With many tokens, B is copied a panel of columns at a time into a
// contiguous buffer that every token tile then reads from L1 (B is read
// from L2 once per call, not once per tile of 4 tokens). B's rows are `out`
// apart: when that is a multiple of 2 KiB, the rows a tile reads fall into
// one or two L1 sets and evict each other (Zen 3, rank 16, 4 tokens: 34
// GFLOP/s unpacked at out = 2048, 73 at 2064, 47 packed), so such a B is
// packed from 2 tokens on. Otherwise the copy pays from about 16 tokens (at
// 4 tokens it cost a third; at 64 the two were even or packed won by up to
// 25%). One token reads B once anyway, straight from where it is.
template <class F, class Cfg, LoraWeightType T>
static void lora_expand_typed(const LoraExpandArgs& p) {
  using W = LoraRead<F, T>;
  using Packed = LoraRead<F, LoraWeightType::kF32>;
  const int64_t width = kLoraPanelFloats / p.rank / F::kW * F::kW;  // panel columns, whole vectors
  const int64_t pack_from = p.out % 512 == 0 ? 2 : 16;
  if (p.n < pack_from || width == 0) {
    const LoraPanel whole{p.b, p.out, 0, p.out};
    lora_token_tiles(p.n, [&]<int TT>(int64_t i) { lora_expand_tokens<F, Cfg, W, TT>(p, whole, i); });
    return;
  }
  alignas(64) float packed[kLoraPanelFloats];
  for (int64_t o0 = 0; o0 < p.out; o0 += width) {
    const int64_t w = p.out - o0 < width ? p.out - o0 : width;
    for (int64_t k = 0; k < p.rank; ++k) {
      float* dst = packed + k * width;
      int64_t o = 0;
      for (; o + F::kW <= w; o += F::kW) F::store(dst + o, W::template load<false>(p.b, p.out, k, o0 + o, F::kW));
      if constexpr (T != LoraWeightType::kQ8_0) {
        if (o < w) {
          const int m = static_cast<int>(w - o);
          F::store_tail(dst + o, W::template load<true>(p.b, p.out, k, o0 + o, m), m);
        }
      }
    }
    const LoraPanel pn{packed, width, o0, o0 + w};
    lora_token_tiles(p.n, [&]<int TT>(int64_t i) { lora_expand_tokens<F, Cfg, Packed, TT>(p, pn, i); });
  }
}

template <class F, class Cfg>
static void lora_expand_v(const LoraExpandArgs& p) {
  switch (p.type) {
    case LoraWeightType::kF32: return lora_expand_typed<F, Cfg, LoraWeightType::kF32>(p);
    case LoraWeightType::kF16: return lora_expand_typed<F, Cfg, LoraWeightType::kF16>(p);
    case LoraWeightType::kQ8_0: return lora_expand_typed<F, Cfg, LoraWeightType::kQ8_0>(p);
  }
}

template <class F, class Cfg>
struct LoraDeltaSet {
  static constexpr LoraKernels table = {Cfg::kName, lora_shrink_v<F, Cfg>, lora_expand_v<F, Cfg>};
};

}  // namespace
}  // namespace tessera::kernels
