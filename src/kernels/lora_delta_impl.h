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
// token fell into.
#pragma once

#include <cstdint>
#include <cstring>

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

// ax[i0 + t][k0 + r] for t < TT, r < R (xr: the TT tokens' rows of x).
template <class F, int TT, int R>
static void lora_shrink_tile(const LoraShrinkArgs& p, const float* const* xr, int64_t i0, int64_t k0) {
  using V = typename F::V;
  V acc[TT][R];
  for (int t = 0; t < TT; ++t) {
    for (int r = 0; r < R; ++r) acc[t][r] = F::zero();
  }
  const float* a = p.a + k0 * p.in;
  auto step = [&]<bool kPartial>(int64_t j, int m) {
    V av[R];
    for (int r = 0; r < R; ++r) av[r] = lora_load<F, kPartial>(a + r * p.in + j, m);
    for (int t = 0; t < TT; ++t) {
      const V xv = lora_load<F, kPartial>(xr[t] + j, m);
      for (int r = 0; r < R; ++r) acc[t][r] = F::fmadd(av[r], xv, acc[t][r]);
    }
  };
  int64_t j = 0;
  for (; j + F::kW <= p.in; j += F::kW) step.template operator()<false>(j, F::kW);
  if (j < p.in) step.template operator()<true>(j, static_cast<int>(p.in - j));
  for (int t = 0; t < TT; ++t) {
    float* ax = p.ax + (i0 + t) * p.rank + k0;
    for (int r = 0; r < R; ++r) ax[r] = F::hsum(acc[t][r]) * p.scale;
  }
}

// Ranks [k, rank) of tokens i0..i0+TT-1, R at a time, the rest by narrower tiles.
template <class F, int TT, int R>
static void lora_shrink_ranks(const LoraShrinkArgs& p, const float* const* xr, int64_t i0, int64_t k) {
  for (; k + R <= p.rank; k += R) lora_shrink_tile<F, TT, R>(p, xr, i0, k);
  if constexpr (R > 1) {
    if (k < p.rank) lora_shrink_ranks<F, TT, R / 2>(p, xr, i0, k);
  }
}

// Columns [o0, o1) of B, column o of rank k at b + (o - o0) + k * stride:
// B itself (stride out) or a packed copy of those columns.
struct LoraPanel {
  const float* b;
  int64_t stride, o0, o1;
};

// y[row, o..] += acc for C vectors along out from o; with kPartial, C = 1
// and only the first m lanes exist.
template <class F, int TT, int C, bool kPartial>
static void lora_expand_tile(const LoraPanel& pn, int64_t rank, float* const* yr, const float* ax, int64_t o, int m) {
  using V = typename F::V;
  static_assert(!kPartial || C == 1);
  V acc[TT][C];
  for (int t = 0; t < TT; ++t) {
    for (int c = 0; c < C; ++c) acc[t][c] = F::zero();
  }
  const float* b = pn.b + (o - pn.o0);
  for (int64_t k = 0; k < rank; ++k, b += pn.stride) {
    V bv[C];
    for (int c = 0; c < C; ++c) bv[c] = lora_load<F, kPartial>(b + c * F::kW, m);
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
template <class F, int TT, int C>
static void lora_expand_cols(const LoraPanel& pn, int64_t rank, float* const* yr, const float* ax, int64_t o) {
  for (; o + C * F::kW <= pn.o1; o += C * F::kW) lora_expand_tile<F, TT, C, false>(pn, rank, yr, ax, o, F::kW);
  if constexpr (C > 1) {
    if (o < pn.o1) lora_expand_cols<F, TT, C / 2>(pn, rank, yr, ax, o);
  } else {
    if (o < pn.o1) lora_expand_tile<F, TT, 1, true>(pn, rank, yr, ax, o, static_cast<int>(pn.o1 - o));
  }
}

template <class F, class Cfg, int TT>
static void lora_shrink_tokens(const LoraShrinkArgs& p, int64_t i0) {
  const float* xr[TT];
  for (int t = 0; t < TT; ++t) xr[t] = p.x + lora_row_of(p.rows, i0 + t) * p.x_stride;
  lora_shrink_ranks<F, TT, Cfg::kShrinkRanks[TT]>(p, xr, i0, 0);
}

template <class F, class Cfg, int TT>
static void lora_expand_tokens(const LoraExpandArgs& p, const LoraPanel& pn, int64_t i0) {
  float* yr[TT];
  for (int t = 0; t < TT; ++t) yr[t] = p.y + lora_row_of(p.rows, i0 + t) * p.y_stride;
  lora_expand_cols<F, TT, Cfg::kExpandVectors[TT]>(pn, p.rank, yr, p.ax + i0 * p.rank, pn.o0);
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

template <class F, class Cfg>
static void lora_shrink_v(const LoraShrinkArgs& p) {
  lora_token_tiles(p.n, [&p]<int TT>(int64_t i) { lora_shrink_tokens<F, Cfg, TT>(p, i); });
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
template <class F, class Cfg>
static void lora_expand_v(const LoraExpandArgs& p) {
  const int64_t width = kLoraPanelFloats / p.rank / F::kW * F::kW;  // panel columns, whole vectors
  const int64_t pack_from = p.out % 512 == 0 ? 2 : 16;
  if (p.n < pack_from || width == 0) {
    const LoraPanel whole{p.b, p.out, 0, p.out};
    lora_token_tiles(p.n, [&]<int TT>(int64_t i) { lora_expand_tokens<F, Cfg, TT>(p, whole, i); });
    return;
  }
  alignas(64) float packed[kLoraPanelFloats];
  for (int64_t o0 = 0; o0 < p.out; o0 += width) {
    const int64_t w = p.out - o0 < width ? p.out - o0 : width;
    for (int64_t k = 0; k < p.rank; ++k) {
      std::memcpy(packed + k * width, p.b + k * p.out + o0, 4 * static_cast<size_t>(w));
    }
    const LoraPanel pn{packed, width, o0, o0 + w};
    lora_token_tiles(p.n, [&]<int TT>(int64_t i) { lora_expand_tokens<F, Cfg, TT>(p, pn, i); });
  }
}

template <class F, class Cfg>
struct LoraDeltaSet {
  static constexpr LoraKernels table = {Cfg::kName, lora_shrink_v<F, Cfg>, lora_expand_v<F, Cfg>};
};

}  // namespace
}  // namespace tessera::kernels
