// The sparse kernels' shared vector code (kernels/sparse.h), included only
// by sparse_avx2.cc and sparse_avx512.cc, each compiled for its ISA:
// everything is in an anonymous namespace, so no inline function leaves the
// object (docs/KERNELS.md, "ODR rule"). An ISA file gives the expansion of
// a super-block (X::expand: 64 signed values, zeros where pruned) and the
// decode tile (X::decode<T>); this file gives the driver and the expansion
// of row groups into the dense packed layout (matmul_kernels.h) for long
// inputs.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kernels/sparse_kernels.h"

namespace tessera::kernels {
namespace {

// Shuffle controls of the AVX2 expansion: for an 8-bit mask, byte j takes
// the packed value popcount(mask & ((1 << j) - 1)) where bit j is set, else
// zero (0x80).
struct ExpandLut {
  uint64_t ctl[256];
};
constexpr ExpandLut make_expand_lut() {
  ExpandLut l{};
  for (int m = 0; m < 256; ++m) {
    uint64_t c = 0;
    int k = 0;
    for (int j = 0; j < 8; ++j) {
      const uint64_t byte = (m >> j & 1) ? static_cast<uint64_t>(k++) : 0x80;
      c |= byte << (8 * j);
    }
    l.ctl[m] = c;
  }
  return l;
}
constexpr ExpandLut kExpandLut = make_expand_lut();

// 64 packed values at src (at least 64 bytes readable) expanded under
// mask m into out[64] as signed values, 0 where pruned, with 128-bit
// shuffles.
// `offset`: the packed bytes are q + 128 (SP_Q8_0), made signed first.
inline void expand_lut(const int8_t* src, uint64_t m, int8_t* out, bool offset) {
  int off = 0;
  const __m128i flip = _mm_set1_epi8(offset ? static_cast<char>(0x80) : 0);
  for (int g = 0; g < 8; ++g) {
    const unsigned mb = static_cast<unsigned>(m >> (8 * g)) & 255u;
    const __m128i s = _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + off)), flip);
    const __m128i c = _mm_cvtsi64_si128(static_cast<long long>(kExpandLut.ctl[mb]));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 8 * g), _mm_shuffle_epi8(s, c));
    off += std::popcount(mb);
  }
}

// SP_Q4_0's nibbles at vp (32 bytes readable) as 64 signed values q - 8 in
// order (low nibble first).
inline void unpack_nibbles(const uint8_t* vp, int8_t* out) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vp));
  const __m256i m4 = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
  const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
  const __m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_sub_epi8(_mm256_permute2x128_si256(a, b, 0x20), eight));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_sub_epi8(_mm256_permute2x128_si256(a, b, 0x31), eight));
}

inline int block_value_bytes(bool q4, uint64_t m) {
  const int k = std::popcount(m);
  return q4 ? (k + 1) / 2 : k;
}

// Tile j's mask in the super-block whose head is at `head`.
inline uint64_t head_mask(const uint8_t* head, int j) {
  uint64_t m;
  std::memcpy(&m, head + 8 * j, 8);
  return m;
}

// The fp16 scales of rows 8 h .. 8 h + 7.
inline __m128i head_scales(const uint8_t* head, int h) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 8 * kSparseGroupRows + 16 * h));
}

// Token t's input values 4 j .. 4 j + 3 of super-block b as one int32.
inline int32_t x_dword(const int8_t* xq, int64_t b, int j) {
  int32_t v;
  std::memcpy(&v, xq + kSparseBlock * b + 4 * j, 4);
  return v;
}

// Software prefetch of a group's stream: each super-block's address
// depends on the previous one's masks (a chain of loads), so the hardware
// prefetchers alone left decode at 5.6 GB/s streaming against 16 GB/s from
// cache (one Xeon core, 5632 x 2048 at 50%). Lines up to kDistance bytes
// ahead of the read pointer are requested.
#ifndef TESSERA_SPARSE_PF
#define TESSERA_SPARSE_PF 4096
#endif
struct StreamPrefetch {
  static constexpr ptrdiff_t kDistance = TESSERA_SPARSE_PF;
  const uint8_t* next = nullptr;
  void ahead(const uint8_t* p) {
    while (next < p + kDistance) {
      _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T1);
      next += 64;
    }
  }
};

// Group g's stream.
inline const uint8_t* group_stream(const SparseView& w, int64_t g) { return w.streams + w.group_start[g]; }

// The 16 rows of group g written as two groups of the dense packed Q8_0 /
// Q4_0 layout (matmul_kernels.h) at out[0] (rows 0..7) and out[1] (rows
// 8..15): tile j expanded is bytes 4 r + i = row r's column 4 j + i, the
// dense layout's 32-byte vector j of 8 rows, twice. Rows past the last are
// zeros, which the dense kernels compute and never store.
template <class X>
void densify_group(const SparseView& w, int64_t g, uint8_t* const out[2]) {
  const bool q4 = w.type == DType::kSpQ4_0;
  const int64_t nb = w.cols / kSparseBlock;
  const size_t blk = q4 ? kPackedQ4_0Block : kPackedQ8_0Block;
  const uint8_t* p = group_stream(w, g);
  alignas(64) int8_t e[16][64];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* vp = p + kSparseBlockHead;
    for (int j = 0; j < 16; ++j) {
      const uint64_t m = head_mask(p, j);
      X::expand(q4, vp, m, e[j]);
      vp += block_value_bytes(q4, m);
    }
    for (int h = 0; h < 2; ++h) {
      for (int half = 0; half < 2; ++half) {
        uint8_t* o = out[half] + static_cast<size_t>(2 * b + h) * blk;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o), head_scales(p, half));
        if (!q4) {
          for (int j = 0; j < 8; ++j) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16 + 32 * j),
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(e[8 * h + j] + 32 * half)));
          }
        } else {
          const __m256i eight = _mm256_set1_epi8(8);
          for (int k = 0; k < 4; ++k) {
            const __m256i lo = _mm256_add_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(e[8 * h + k] + 32 * half)), eight);
            const __m256i hi = _mm256_add_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(e[8 * h + k + 4] + 32 * half)), eight);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16 + 32 * k), _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
          }
        }
      }
    }
    p = vp;
  }
}

// Long inputs: chunks of rows expanded into the dense packed layout, then
// the dense prompt tiles (a.dense) on them, so the arithmetic is the dense
// type's.
template <class X>
void dense_chunks(const SparseView& w, const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const bool q4 = w.type == DType::kSpQ4_0;
  const int64_t nb32 = w.cols / 32;
  const size_t group_bytes = static_cast<size_t>(nb32) * (q4 ? kPackedQ4_0Block : kPackedQ8_0Block);
  uint8_t* buf = sparse_scratch(group_bytes * (kSparseChunkRows / kRowTile));
  for (int64_t c0 = r0; c0 < r1; c0 += kSparseChunkRows) {
    const int64_t c1 = c0 + kSparseChunkRows < r1 ? c0 + kSparseChunkRows : r1;
    for (int64_t g0 = c0; g0 < c1; g0 += kSparseGroupRows) {
      const size_t at = static_cast<size_t>((g0 - c0) / kRowTile) * group_bytes;
      uint8_t* const out[2] = {buf + at, buf + at + group_bytes};
      densify_group<X>(w, g0 / kSparseGroupRows, out);
    }
    MatmulArgs d = a;
    d.w = buf;
    d.rows = c1 - c0;
    d.row_bytes = static_cast<size_t>(nb32) * (q4 ? 18 : 34);
    d.y = a.y + c0;
    d.dense = nullptr;
    a.dense(d, 0, c1 - c0, t0, t1);
  }
}

// The range kernel: decode tiles of 16 rows and up to 4 tokens, or dense
// chunks for long inputs.
template <class X>
void sparse_range_impl(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const SparseView w = sparse_view(a.w);
  if (t1 - t0 > kSparseDecodeMaxTokens && a.dense != nullptr) {
    dense_chunks<X>(w, a, r0, r1, t0, t1);
    return;
  }
  for (int64_t g0 = r0; g0 < r1; g0 += kSparseGroupRows) {
    if (X::kPairs && t1 - t0 == 1 && g0 + kSparseGroupRows < r1) {  // one token: two groups side by side
      X::decode_pair(w, a, g0, r1, t0);
      g0 += kSparseGroupRows;
      continue;
    }
    for (int64_t t = t0; t < t1; t += 4) {
      switch (t1 - t < 4 ? t1 - t : 4) {
        case 1: X::template decode<1>(w, a, g0, r1, t); break;
        case 2: X::template decode<2>(w, a, g0, r1, t); break;
        case 3: X::template decode<3>(w, a, g0, r1, t); break;
        default: X::template decode<4>(w, a, g0, r1, t); break;
      }
    }
  }
}

// Token t's quantized activation: values and block scales.
inline const int8_t* act_q(const MatmulArgs& a, int64_t t) {
  return reinterpret_cast<const int8_t*>(a.act + static_cast<size_t>(t) * a.act_layout.row_bytes);
}
inline const float* act_d(const MatmulArgs& a, int64_t t) {
  return reinterpret_cast<const float*>(a.act + static_cast<size_t>(t) * a.act_layout.row_bytes + a.act_layout.d_offset);
}

inline const int16_t* act_sums(const MatmulArgs& a, int64_t t) {
  return reinterpret_cast<const int16_t*>(a.act + static_cast<size_t>(t) * a.act_layout.row_bytes + a.act_layout.sum_offset);
}

// Lanes [0, n) of v (at most 8) to y.
inline void store_rows(const __m256 acc, float* y, int64_t n) {
  alignas(32) float v[8];
  _mm256_store_ps(v, acc);
  for (int64_t r = 0; r < n && r < 8; ++r) y[r] = v[r];
}

}  // namespace
}  // namespace tessera::kernels
