// AMX-INT8 prompt kernels for the packed kinds of 32-value blocks (Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4), for Q4_K, Q5_K and IQ4_XS, and for Q2_K,
// Q3_K and TQ2_0 / TQ1_0 (scales folded into the values), compiled with the AVX-512 flags
// plus -mamx-tile -mamx-int8 by the *_amx.cc rule. Only called when
// amx_usable() (core/cpu.h): the CPU has AMX-INT8 and Linux granted the
// process the tile state.
//
// Why: the AVX-512 tiles spend one vpdpbusd per 64 multiply-adds and the
// float step per block on the same two vector ports. One tdpbssd does
// 16 tokens x 16 rows x 32 values (8192 multiply-adds) on the tile unit,
// so the vector ports are left with only the float step. Measured on the
// Xeon (docs/KERNELS.md, "AMX"): 16x16x32 tdpbssd at ~5 ns, the C tile's
// store at 14-19 ns; a 2048x2048 product of 128 tokens 1.5x AVX-512's.
//
// The table is the AVX-512 one with the packed prompt kernels of those
// kinds replaced: full 16-token tiles on row-group pairs go through AMX,
// everything else (decode, the last tokens, a lone last row group) through
// the AVX-512 kernels. The arithmetic is the contract's (matmul_kernels.h):
// tdpbssd forms each block's exact int32 sum of value * activation, with
// the kind's offset already taken out of the values (Q4_0: q - 8, Q5_0:
// q - 16; the table kinds' signed levels), then per block in order
//   acc = fma(float(isum), fl(d_w * d_x), acc)  [+ fma(float(sum x), fl(m * d_x), acc)]
// so the bits equal the scalar reference's and every other table's.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/amx_tile.h"
#include "kernels/blocks.h"
#include "kernels/matmul_kernels.h"
#include "kernels/pair_avx512.h"

namespace tessera::kernels {
namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// Tiles: 0 = A, 16 tokens x K int8 activations; 1 = B, K values of 16
// rows in the VNNI order (K / 4 rows of 4 values x 16 columns); 2 = C, 16
// tokens x 16 rows of int32 sums. K = 32 for blocks and sub-blocks of 32,
// 64 for the folded kinds, 16 for Q6_K's sub-blocks.
constexpr int kTokens = 16;
constexpr TileConfig make_config(int k) {
  TileConfig c{};
  c.palette = 1;
  c.rows[0] = kTokens, c.colsb[0] = static_cast<uint16_t>(k);
  c.rows[1] = static_cast<uint8_t>(k / 4), c.colsb[1] = 64;
  c.rows[2] = kTokens, c.colsb[2] = 64;
  return c;
}
constexpr TileConfig kConfig = make_config(32);

// sum_s dot_s * sc_s for token t, the N sub-blocks' C buffers at c + 256 s:
// the exact integer sum of a super-block (every term and sum well inside int32).
template <int N>
__attribute__((always_inline)) inline __m512i scaled_dots(const int32_t* c, const __m512i (&sc)[N], int t) {
  __m512i isum = _mm512_setzero_si512();
  for (int s = 0; s < N; ++s) {
    const __m512i dot = _mm512_load_si512(reinterpret_cast<const __m512i*>(c + 256 * s + 16 * t));
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, sc[s]));
  }
  return isum;
}

// sum_k pairs_k . (xs[2k], xs[2k + 1]): each row's mins (int16 pairs per
// lane) times the token's group sums, the min term's exact integer.
template <int N>
__attribute__((always_inline)) inline __m512i min_sums(const __m512i (&pairs)[N], const int16_t* xs) {
  __m512i msum = _mm512_setzero_si512();
  for (int k = 0; k < N; ++k) {
    int32_t pair;
    std::memcpy(&pair, xs + 2 * k, 4);
    msum = _mm512_add_epi32(msum, _mm512_madd_epi16(pairs[k], _mm512_set1_epi32(pair)));
  }
  return msum;
}

// Kind K's layout facts (matmul_kernels.h): where the values, fifth bits
// and mins are, and what is subtracted from a value to make it signed.
template <Packed K>
struct Kind {
  static constexpr bool kLut = K == Packed::kIQ4_NL || K == Packed::kMXFP4;
  static constexpr bool kNibbles = K != Packed::kQ8_0;
  static constexpr bool kMin = K == Packed::kQ4_1 || K == Packed::kQ5_1;
  static constexpr bool kFifth = K == Packed::kQ5_0 || K == Packed::kQ5_1;
  static constexpr size_t kQh = 16 + (kMin ? 16 : 0);
  static constexpr size_t kVal = kQh + (kFifth ? 32 : 0);
  static constexpr int kOffset = K == Packed::kQ4_0 ? 8 : K == Packed::kQ5_0 ? 16 : 0;
  static constexpr size_t kBytes = kPackedBytes[static_cast<int>(K)];
  // Tiles of 32 values per block (Q4_K: its 8 sub-blocks), and the blocks
  // between a block's tile work and its float step (enough C stores in
  // between for each to reach the cache).
  static constexpr int kSubs = static_cast<int>(kPackedValues[static_cast<int>(K)] / 32);
  static constexpr int kLag = kSubs == 1 ? 4 : 1;
};

// Writes block b0 / b1 (the same block of two consecutive row groups) as a
// B tile: row j = values 4j..4j + 3 of rows 0-7 (b0), then of rows 8-15
// (b1), signed. The packed layout already interleaves 8 rows in 4-value
// groups, so a row is one 32-byte load of each group.
// Q4_K: 8 such tiles (512 bytes apart), sub-block s's values unsigned
// (0..15); sub-blocks 2p and 2p + 1 are the low and high nibbles of the
// same 8 loads. Q5_K: the same with the fifth bits (0..31). IQ4_XS: its 8
// sub-blocks' table levels (signed).
template <Packed K>
inline void build_b(const uint8_t* b0, const uint8_t* b1, uint8_t* out) {
  using k = Kind<K>;
  const auto put = [&](int j, __m512i v) { _mm512_store_si512(reinterpret_cast<__m512i*>(out + 64 * j), v); };
  if constexpr (K == Packed::kQ4_K || K == Packed::kQ5_K) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int p = 0; p < 4; ++p) {
      for (int h = 0; h < 8; ++h) {
        const __m512i v = join256(b0 + 160 + 256 * p + 32 * h, b1 + 160 + 256 * p + 32 * h);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (K == Packed::kQ5_K) {
          q5_k_fifth_bits16(join256(b0 + kPackedQ4_KBlock + 32 * h, b1 + kPackedQ4_KBlock + 32 * h), p, lo, hi);
        }
        put(8 * 2 * p + h, lo);
        put(8 * (2 * p + 1) + h, hi);
      }
    }
  } else if constexpr (K == Packed::kIQ4_XS) {  // per sub-block s, Q4_0's values as table levels
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)));
    for (int sb = 0; sb < 8; ++sb) {
      for (int h = 0; h < 4; ++h) {
        const __m512i v = join256(b0 + 80 + 128 * sb + 32 * h, b1 + 80 + 128 * sb + 32 * h);
        put(8 * sb + h, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)));
        put(8 * sb + 4 + h, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
      }
    }
  } else if constexpr (!k::kNibbles) {
    for (int j = 0; j < 8; ++j) put(j, join256(b0 + 16 + 32 * j, b1 + 16 + 32 * j));
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0f), off = _mm512_set1_epi8(static_cast<char>(k::kOffset));
    const __m512i lut = k::kLut ? _mm512_broadcast_i32x4(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(K == Packed::kMXFP4 ? kMXFP4Values : kIQ4Values)))
                                : _mm512_setzero_si512();
    for (int h = 0; h < 4; ++h) {  // low nibbles: values 4h + i; high: 16 + 4h + i
      const __m512i v = join256(b0 + k::kVal + 32 * h, b1 + k::kVal + 32 * h);
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if constexpr (k::kFifth) {
        const __m512i qh = join256(b0 + k::kQh, b1 + k::kQh), one = _mm512_set1_epi8(1);
        lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, h), one), 4));
        hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4 + h), one), 4));
      }
      if constexpr (k::kLut) {
        lo = _mm512_shuffle_epi8(lut, lo);
        hi = _mm512_shuffle_epi8(lut, hi);
      } else if constexpr (k::kOffset != 0) {
        lo = _mm512_sub_epi8(lo, off);
        hi = _mm512_sub_epi8(hi, off);
      }
      put(h, lo);
      put(4 + h, hi);
    }
  }
}

// A tile's results go through memory twice: decoded values are stored and
// then loaded as B, and C is stored and then loaded into vectors. Neither
// is forwarded from the store buffer, so each load waits for its store to
// reach the cache; done block by block that round trip serialises the
// tile unit and the vector ports (measured: ~46 ns a block, no faster than
// AVX-512). So the pair's B tiles are all decoded first (bscratch, nb x
// 512 bytes, reused by every token tile), and the float step of block b
// runs Kind::kLag blocks after its tile work, from a ring of kRing C buffers.
constexpr int kRing = 16;
template <Packed K>
constexpr bool ring_fits() {
  return (Kind<K>::kLag + 1) * Kind<K>::kSubs <= kRing;
}

// The packed pair's B tiles, 32 values u (of the row) at bscratch + 512 u.
template <Packed K>
void build_pair(const uint8_t* g0, size_t group_bytes, int64_t nb, uint8_t* bscratch) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * Kind<K>::kBytes;
    build_b<K>(b0, b0 + group_bytes, bscratch + 512 * Kind<K>::kSubs * b);
  }
}

// Q4_K's (and Q5_K's) float step of super-block b from its 8 C buffers (c + 256 s):
// ktile16's arithmetic (matmul_avx512.cc) with the sub-block dots from the
// tiles: isum = sum_s sc_s * dot_s, msum = sum_s m_s * sum(x_s), then
// acc = fma(float(isum), fl(d * dx), acc), acc = fnma(float(msum), fl(dmin * dx), acc).
template <Packed K>
__attribute__((always_inline)) inline void finish_q4_k(const uint8_t* g0, size_t group_bytes, int64_t b,
                                                       const uint8_t* act, const ActLayout& lay, const int32_t* c,
                                                       __m512 (&acc)[kTokens]) {
  const uint8_t* b0 = g0 + static_cast<size_t>(b) * kPackedBytes[static_cast<int>(K)];
  const uint8_t* b1 = b0 + group_bytes;
  constexpr bool kXs = K == Packed::kIQ4_XS;  // scales ls - 32 (int8) at 16 + 8 s, no mins
  __m512i sc[8], mins[4];
  for (int s = 0; s < 8; ++s) {
    sc[s] = kXs ? _mm512_cvtepi8_epi32(join64(b0 + 16 + 8 * s, b1 + 16 + 8 * s))
                : scale_lanes16(b0 + 32 + 8 * s, b1 + 32 + 8 * s);
  }
  for (int i = 0; i < 4 && !kXs; ++i) {
    mins[i] = _mm512_cvtepu8_epi16(join128(b0 + 96 + 16 * i, b1 + 96 + 16 * i));
  }
  const __m512 wd = fp16x16(b0, b1), wmin = fp16x16(b0 + 16, b1 + 16);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    const __m512i isum = scaled_dots(c, sc, t);
    const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + lay.d_offset)[b]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd, dx), acc[t]);
    if constexpr (!kXs) {
      const __m512i msum = min_sums(mins, reinterpret_cast<const int16_t*>(row + lay.sum_offset) + 8 * b);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(wmin, dx), acc[t]);
    }
  }
}

// The float step of block b from its C buffer (16 tokens x 16 rows).
template <Packed K>
__attribute__((always_inline)) inline void finish(const uint8_t* g0, size_t group_bytes, int64_t b,
                                                  const uint8_t* act, const ActLayout& lay, const int32_t* c,
                                                  __m512 (&acc)[kTokens]) {
  using k = Kind<K>;
  if constexpr (K == Packed::kQ4_K || K == Packed::kQ5_K || K == Packed::kIQ4_XS) {
    return finish_q4_k<K>(g0, group_bytes, b, act, lay, c, acc);
  }
  const uint8_t* b0 = g0 + static_cast<size_t>(b) * k::kBytes;
  const __m512 ws = fp16x16(b0, b0 + group_bytes);
  __m512 wm = _mm512_setzero_ps();
  if constexpr (k::kMin) wm = fp16x16(b0 + 16, b0 + group_bytes + 16);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + lay.d_offset)[b]);
    const __m512i isum = _mm512_load_si512(reinterpret_cast<const __m512i*>(c + 16 * t));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(ws, dx), acc[t]);
    if constexpr (k::kMin) {  // + sum(x) * fl(m * dx)
      const float sx = reinterpret_cast<const int16_t*>(row + lay.sum_offset)[b];
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(sx), _mm512_mul_ps(wm, dx), acc[t]);
    }
  }
}

// Tile loads and stores as plain asm (GCC's _tile_stored clobbers all
// memory, which keeps the 16 accumulators on the stack). The compiler is
// told the order instead: every volatile asm keeps its place among the
// others, B's decoded tiles are all stored before a full barrier
// (pair_tile), and a C buffer is read through a pointer that comes out of
// an empty volatile asm after the store (after_tile_store). A's
// activations are not written while the kernels run. The tile number is
// pasted into the text: it must be a literal.
#define TESSERA_TILE_LOAD(tmm, base, stride) asm volatile("tileloadd (%0,%1,1), %%tmm" #tmm ::"r"(base), "r"(stride))
#define TESSERA_TILE_STORE(tmm, base, stride) \
  asm volatile("tilestored %%tmm" #tmm ", (%0,%1,1)" ::"r"(base), "r"(stride))

inline const int32_t* after_tile_store(const int32_t* p) {
  asm volatile("" : "+r"(p));
  return p;
}

// The frame every tile function shares: tiles(b) issues block b's tile
// work, finish(b) its float step kLag blocks later (after kLag more blocks'
// C stores, so that each store has reached the cache when it is read).
template <int kLag, class Tiles, class Finish>
__attribute__((always_inline)) inline void lagged_blocks(int64_t nb, Tiles tiles, Finish finish) {
  const int64_t lead = imin(kLag, nb);
  for (int64_t b = 0; b < lead; ++b) tiles(b);
  for (int64_t b = lead; b < nb; ++b) {
    tiles(b);
    finish(b - kLag);
  }
  for (int64_t b = nb - lead; b < nb; ++b) finish(b);
}

// The 16 tokens' accumulators to y (rows r < nvalid of each).
__attribute__((always_inline)) inline void store_tile(const __m512 (&acc)[kTokens], float* y, int64_t y_stride,
                                                     int nvalid) {
  const __mmask16 mask = static_cast<__mmask16>((1u << nvalid) - 1);
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

// One 16-token x 16-row tile over every block: the packed group pair at g0
// (its B tiles in bscratch), the tokens' activation rows from act (stride
// lay.row_bytes), y[t * y_stride + r] for r < nvalid.
template <Packed K>
void pair_tile(const uint8_t* g0, size_t group_bytes, int64_t nb, const uint8_t* bscratch, int32_t (*cbuf)[kTokens * 16],
               const uint8_t* act, const ActLayout& lay, float* y, int64_t y_stride, int nvalid) {
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const long stride = static_cast<long>(lay.row_bytes);
  asm volatile("" ::: "memory");  // bscratch's stores before the first tile load
  const auto tiles = [&](int64_t u) __attribute__((always_inline)) {  // 32 values u
    TESSERA_TILE_LOAD(1, bscratch + 512 * u, 64L);
    TESSERA_TILE_LOAD(0, act + 32 * u, stride);
    _tile_zero(2);
    _tile_dpbssd(2, 0, 1);
    TESSERA_TILE_STORE(2, cbuf[u & (kRing - 1)], 64L);
  };
  constexpr int kSubs = Kind<K>::kSubs, kLag = Kind<K>::kLag;
  static_assert(ring_fits<K>(), "a C buffer is read before it is written again");
  const auto block_tiles = [&](int64_t b) __attribute__((always_inline)) {
    for (int s = 0; s < kSubs; ++s) tiles(kSubs * b + s);
  };
  const auto block_finish = [&](int64_t b) __attribute__((always_inline)) {
    finish<K>(g0, group_bytes, b, act, lay, after_tile_store(cbuf[(kSubs * b) & (kRing - 1)]), acc);
  };
  // lagged_blocks' loops written out: through it, Q8_0's tile ran at 460
  // GFLOP/s against 490 (2048x2048, 128 tokens, alternating A/B).
  const int64_t lead = imin(kLag, nb);
  for (int64_t b = 0; b < lead; ++b) block_tiles(b);
  for (int64_t b = lead; b < nb; ++b) {
    block_tiles(b);
    block_finish(b - kLag);
  }
  for (int64_t b = nb - lead; b < nb; ++b) block_finish(b);
  store_tile(acc, y, y_stride, nvalid);
}

// A thread's scratch: the ring of C buffers (room for Q6_K's 32), then the
// decoded B tiles, grown as needed.
constexpr size_t kCBytes = sizeof(int32_t) * 32 * kTokens * 16;
uint8_t* scratch_for(int64_t units) {
  struct Buf {
    uint8_t* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  const size_t need = kCBytes + static_cast<size_t>(units) * 512;
  if (buf.n < need) {
    std::free(buf.p);
    buf.p = static_cast<uint8_t*>(std::aligned_alloc(64, need));
    buf.n = need;
  }
  return buf.p;
}

// ---- kinds whose sub-block scales fold into the values -----------------------
// Q2_K (q in 0..3 times a 4-bit scale: 0..45), Q3_K (q in -4..3 times a
// signed 6-bit scale: -124..128, so stored negated: -128..124) and TQ2_0 /
// TQ1_0 (t - 1 in -1..1, no sub-block scales): scale times value fits an
// int8, so a super-block's exact sum sum_s sc_s * dot_s is one C tile
// accumulated over its 256 values (4 tdpbssd of 64), stored once per
// super-block instead of once per sub-block. The integer is the one the
// AVX-512 tiles form (q2tile16, sub_block_tile16, tq2tile16), so the bits
// are theirs.
template <Packed K>
constexpr bool kFolded = K == Packed::kQ2_K || K == Packed::kQ3_K || K == Packed::kTQ2_0;

// Tiles of the folded kinds: A 16 tokens x 64 activations, B 64 values of
// 16 rows (16 rows of 4 values x 16 columns), C as before.
constexpr TileConfig kFoldedConfig = make_config(64);

// Values 128n + 32j + 4q + i (i < 4) of the 16 rows as unsigned bytes
// (Q2_K, TQ2_0: 0..3; Q3_K: u = q + 4, 0..7), in the packed layouts of
// matmul_kernels.h.
template <Packed K>
inline __m512i folded_values(const uint8_t* b0, const uint8_t* b1, int n, int j, int q) {
  const __m512i m3 = _mm512_set1_epi8(3);
  if constexpr (K == Packed::kQ3_K) {
    const size_t at = 144 + 384 * n + 96 * (q / 2);
    const __m512i low = join256(b0 + at + 32 * (q % 2), b1 + at + 32 * (q % 2));
    const __m512i third = join256(b0 + at + 64, b1 + at + 64);
    const int bit = j + 4 * (q % 2);
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(low, 2 * j), m3);
    const __m512i hi = bit >= 2 ? _mm512_srli_epi16(third, bit - 2) : _mm512_slli_epi16(third, 2 - bit);
    return _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi8(4)));
  } else {
    const size_t at = (K == Packed::kQ2_K ? 288 : 16) + 256 * n + 32 * q;
    return _mm512_and_si512(_mm512_srli_epi16(join256(b0 + at, b1 + at), 2 * j), m3);
  }
}

// Sub-block s's scale of each of the 16 rows in both 16-bit halves of the
// row's 32-bit lane (Q2_K: unsigned 4-bit; Q3_K: signed int8).
template <Packed K>
inline __m512i folded_scale16(const uint8_t* b0, const uint8_t* b1, int s) {
  __m512i sc32;
  if constexpr (K == Packed::kQ2_K) {
    sc32 = scale_lanes16(b0 + 32 + 8 * s, b1 + 32 + 8 * s);
  } else {
    sc32 = q6_scale16(b0, b1, s);
  }
  return _mm512_or_si512(_mm512_and_si512(sc32, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(sc32, 16));
}

// One super-block of a row-group pair as 4 B tiles of 64 values (1 KiB
// each): value v = 128n + 32j + 4q + i is in B row v / 4 = 32n + 8j + q.
template <Packed K>
inline void build_folded(const uint8_t* b0, const uint8_t* b1, uint8_t* out) {
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int q = 0; q < 8; ++q) {
        const __m512i u = folded_values<K>(b0, b1, n, j, q);
        __m512i v;
        if constexpr (K == Packed::kTQ2_0) {
          v = _mm512_sub_epi8(u, _mm512_set1_epi8(1));
        } else if constexpr (K == Packed::kQ2_K) {
          // u * sc < 256: one 16-bit multiply makes both bytes' products.
          v = _mm512_mullo_epi16(u, folded_scale16<K>(b0, b1, 8 * n + 2 * j + q / 4));
        } else {  // Q3_K: -(sc * (u - 4)) per byte, through 16-bit products
          const __m512i sc = folded_scale16<K>(b0, b1, 8 * n + 2 * j + q / 4);
          const __m512i w = _mm512_sub_epi8(u, _mm512_set1_epi8(4));
          const __m512i even = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8), sc);
          const __m512i odd = _mm512_mullo_epi16(_mm512_srai_epi16(w, 8), sc);
          const __m512i zero = _mm512_setzero_si512();
          v = _mm512_or_si512(_mm512_and_si512(_mm512_sub_epi16(zero, even), _mm512_set1_epi16(0x00ff)),
                              _mm512_slli_epi16(_mm512_sub_epi16(zero, odd), 8));
        }
        _mm512_store_si512(reinterpret_cast<__m512i*>(out + 64 * (32 * n + 8 * j + q)), v);
      }
    }
  }
}

// The float step of super-block b from its C buffer.
template <Packed K>
__attribute__((always_inline)) inline void finish_folded(const uint8_t* g0, size_t group_bytes, int64_t b,
                                                         const uint8_t* act, const ActLayout& lay, const int32_t* c,
                                                         __m512 (&acc)[kTokens]) {
  const uint8_t* b0 = g0 + static_cast<size_t>(b) * Kind<K>::kBytes;
  const uint8_t* b1 = b0 + group_bytes;
  const __m512 wd = fp16x16(b0, b1);
  __m512 wm = _mm512_setzero_ps();
  __m512i mpair[8];  // Q2_K: the mins as int16 pairs, lane r = (m_r[2k], m_r[2k + 1])
  if constexpr (K == Packed::kQ2_K) {
    wm = fp16x16(b0 + 16, b1 + 16);
    for (int k = 0; k < 8; ++k) {
      mpair[k] = _mm512_or_si512(scale_lanes16(b0 + 160 + 16 * k, b1 + 160 + 16 * k),
                                 _mm512_slli_epi32(scale_lanes16(b0 + 168 + 16 * k, b1 + 168 + 16 * k), 16));
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    __m512i isum = _mm512_load_si512(reinterpret_cast<const __m512i*>(c + 16 * t));
    if constexpr (K == Packed::kQ3_K) isum = _mm512_sub_epi32(_mm512_setzero_si512(), isum);
    const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + lay.d_offset)[b]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd, dx), acc[t]);
    if constexpr (K == Packed::kQ2_K) {
      const __m512i msum = min_sums(mpair, reinterpret_cast<const int16_t*>(row + lay.sum_offset) + 16 * b);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(wm, dx), acc[t]);
    }
  }
}

// pair_tile for the folded kinds: per super-block, C zeroed, 4 tdpbssd of
// 64 values, one store; the float step two super-blocks behind.
template <Packed K>
void folded_tile(const uint8_t* g0, size_t group_bytes, int64_t nb, const uint8_t* bscratch,
                 int32_t (*cbuf)[kTokens * 16], const uint8_t* act, const ActLayout& lay, float* y, int64_t y_stride,
                 int nvalid) {
  constexpr int kLag = 2;
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const long stride = static_cast<long>(lay.row_bytes);
  asm volatile("" ::: "memory");  // bscratch's stores before the first tile load
  const auto tiles = [&](int64_t b) __attribute__((always_inline)) {
    _tile_zero(2);
    for (int k = 0; k < 4; ++k) {
      TESSERA_TILE_LOAD(1, bscratch + 4096 * b + 1024 * k, 64L);
      TESSERA_TILE_LOAD(0, act + 256 * b + 64 * k, stride);
      _tile_dpbssd(2, 0, 1);
    }
    TESSERA_TILE_STORE(2, cbuf[b & (kRing - 1)], 64L);
  };
  const auto finish_block = [&](int64_t b) __attribute__((always_inline)) {
    finish_folded<K>(g0, group_bytes, b, act, lay, after_tile_store(cbuf[b & (kRing - 1)]), acc);
  };
  lagged_blocks<kLag>(nb, tiles, finish_block);
  store_tile(acc, y, y_stride, nvalid);
}

// ---- Q6_K: sub-blocks of 16 ---------------------------------------------------
// Q6_K's int8 scales times its 6-bit values do not fit an int8 and its
// sub-blocks hold 16 values, so each sub-block is its own tdpbssd of K = 16
// and its own C store (16 a super-block), then q6tile's integer step
// sum_s sc_s * dot_s with the values made signed (q - 32) in B.
constexpr TileConfig kQ6Config = make_config(16);
constexpr int kQ6Ring = 32;  // two super-blocks of 16 C buffers

// One super-block of a pair as 16 B tiles (256 bytes each), sub-block s =
// values 16 s .. 16 s + 15 at out + 256 s; value 128n + 32j + 4g + i is in
// sub-block 8n + 2j + g / 4, B row g % 4 (matmul_kernels.h's Q6_K order).
inline void build_q6(const uint8_t* b0, const uint8_t* b1, uint8_t* out) {
  const __m512i m6 = _mm512_set1_epi8(0x3f), off = _mm512_set1_epi8(32);
  for (int n = 0; n < 2; ++n) {
    for (int g = 0; g < 8; ++g) {
      const size_t at = 144 + 768 * n + 96 * g;
      const __m512i v0 = join256(b0 + at, b1 + at), v1 = join256(b0 + at + 32, b1 + at + 32);
      const __m512i v2 = join256(b0 + at + 64, b1 + at + 64);
      const __m512i u[4] = {_mm512_and_si512(v0, m6), _mm512_and_si512(v1, m6), _mm512_and_si512(v2, m6),
                            q6_fourth16(v0, v1, v2)};
      for (int j = 0; j < 4; ++j) {
        const int sb = 8 * n + 2 * j + g / 4;
        _mm512_store_si512(reinterpret_cast<__m512i*>(out + 256 * sb + 64 * (g % 4)), _mm512_sub_epi8(u[j], off));
      }
    }
  }
}

// The float step of super-block b from its 16 C buffers (c + 256 s).
__attribute__((always_inline)) inline void finish_q6(const uint8_t* g0, size_t group_bytes, int64_t b,
                                                     const uint8_t* act, const ActLayout& lay, const int32_t* c,
                                                     __m512 (&acc)[kTokens]) {
  const uint8_t* b0 = g0 + static_cast<size_t>(b) * kPackedQ6_KBlock;
  const uint8_t* b1 = b0 + group_bytes;
  __m512i sc[16];  // sub-block s's int8 scale of each row, as int32 lanes
  for (int sb = 0; sb < 16; ++sb) sc[sb] = q6_scale16(b0, b1, sb);
  const __m512 wd = fp16x16(b0, b1);
  for (int t = 0; t < kTokens; ++t) {
    const uint8_t* row = act + static_cast<size_t>(t) * lay.row_bytes;
    const __m512i isum = scaled_dots(c, sc, t);
    const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(row + lay.d_offset)[b]);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd, dx), acc[t]);
  }
}

void q6_tile(const uint8_t* g0, size_t group_bytes, int64_t nb, const uint8_t* bscratch,
             int32_t (*cbuf)[kTokens * 16], const uint8_t* act, const ActLayout& lay, float* y, int64_t y_stride,
             int nvalid) {
  constexpr int kLag = 1;
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const long stride = static_cast<long>(lay.row_bytes);
  asm volatile("" ::: "memory");  // bscratch's stores before the first tile load
  const auto tiles = [&](int64_t b) __attribute__((always_inline)) {
    for (int sb = 0; sb < 16; ++sb) {
      const int64_t u = 16 * b + sb;
      TESSERA_TILE_LOAD(1, bscratch + 256 * u, 64L);
      TESSERA_TILE_LOAD(0, act + 16 * u, stride);
      _tile_zero(2);
      _tile_dpbssd(2, 0, 1);
      TESSERA_TILE_STORE(2, cbuf[u & (kQ6Ring - 1)], 64L);
    }
  };
  const auto finish_block = [&](int64_t b) __attribute__((always_inline)) {
    finish_q6(g0, group_bytes, b, act, lay, after_tile_store(cbuf[(16 * b) & (kQ6Ring - 1)]), acc);
  };
  lagged_blocks<kLag>(nb, tiles, finish_block);
  store_tile(acc, y, y_stride, nvalid);
}

// The packed range of kind K: AMX where a full 16-token tile meets a pair
// of row groups, the AVX-512 kernel for the rest (same bits either way).
template <Packed K>
void amx_range(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const MatmulRangeFn base = matmul_kernels_avx512().packed_range[static_cast<int>(K)];
  const int64_t t_amx = t0 + (t1 - t0) / kTokens * kTokens;
  int64_t r_amx = r0;  // rows [r0, r_amx) in pairs of groups with a second group present
  while (r1 - r_amx > kRowTile) r_amx += 2 * kRowTile;
  r_amx = imin(r_amx, r1);
  if (t_amx == t0 || r_amx == r0) return base(a, r0, r1, t0, t1);
  const int64_t nb = a.cols / kPackedValues[static_cast<int>(K)];
  const size_t group_bytes = static_cast<size_t>(nb) * Kind<K>::kBytes;
  const ActLayout& lay = a.act_layout;
  uint8_t* scratch = scratch_for(a.cols / 32);
  auto* cbuf = reinterpret_cast<int32_t(*)[kTokens * 16]>(scratch);
  uint8_t* bscratch = scratch + sizeof(int32_t) * (K == Packed::kQ6_K ? kQ6Ring : kRing) * kTokens * 16;
  _tile_loadconfig(kFolded<K> ? &kFoldedConfig : K == Packed::kQ6_K ? &kQ6Config : &kConfig);
  // Tokens in chunks whose activations stay in L2 while the pairs sweep them.
  const int64_t chunk = imin(t_amx - t0, static_cast<int64_t>(256 * 1024 / lay.row_bytes / kTokens + 1) * kTokens);
  for (int64_t tc = t0; tc < t_amx; tc += chunk) {
    const int64_t tc1 = imin(t_amx, tc + chunk);
    for (int64_t rt = r0; rt < r_amx; rt += 2 * kRowTile) {
      const int nvalid = static_cast<int>(imin(2 * kRowTile, r1 - rt));
      const uint8_t* g0 = a.w + static_cast<size_t>(rt / kRowTile) * group_bytes;
      if constexpr (kFolded<K> || K == Packed::kQ6_K) {
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* b0 = g0 + static_cast<size_t>(b) * Kind<K>::kBytes;
          if constexpr (K == Packed::kQ6_K) {
            build_q6(b0, b0 + group_bytes, bscratch + 4096 * b);
          } else {
            build_folded<K>(b0, b0 + group_bytes, bscratch + 4096 * b);
          }
        }
      } else {
        build_pair<K>(g0, group_bytes, nb, bscratch);
      }
      for (int64_t t = tc; t < tc1; t += kTokens) {
        const uint8_t* at = a.act + static_cast<size_t>(t) * lay.row_bytes;
        float* yt = a.y + t * a.y_stride + rt;
        if constexpr (kFolded<K>) {
          folded_tile<K>(g0, group_bytes, nb, bscratch, cbuf, at, lay, yt, a.y_stride, nvalid);
        } else if constexpr (K == Packed::kQ6_K) {
          q6_tile(g0, group_bytes, nb, bscratch, cbuf, at, lay, yt, a.y_stride, nvalid);
        } else {
          pair_tile<K>(g0, group_bytes, nb, bscratch, cbuf, at, lay, yt, a.y_stride, nvalid);
        }
      }
    }
  }
  _tile_release();
  if (t_amx < t1) base(a, r0, r_amx, t_amx, t1);
  if (r_amx < r1) base(a, r_amx, r1, t0, t1);
}

MatmulKernels make_table() {
  MatmulKernels t = matmul_kernels_avx512();
  t.name = "amx";
  const auto set = [&](Packed k, MatmulRangeFn f) { t.packed_range[static_cast<int>(k)] = f; };
  set(Packed::kQ8_0, amx_range<Packed::kQ8_0>);
  set(Packed::kQ4_0, amx_range<Packed::kQ4_0>);
  set(Packed::kQ4_1, amx_range<Packed::kQ4_1>);
  set(Packed::kQ5_0, amx_range<Packed::kQ5_0>);
  set(Packed::kQ5_1, amx_range<Packed::kQ5_1>);
  set(Packed::kIQ4_NL, amx_range<Packed::kIQ4_NL>);
  set(Packed::kMXFP4, amx_range<Packed::kMXFP4>);
  set(Packed::kQ4_K, amx_range<Packed::kQ4_K>);
  set(Packed::kQ5_K, amx_range<Packed::kQ5_K>);
  set(Packed::kIQ4_XS, amx_range<Packed::kIQ4_XS>);
  set(Packed::kQ6_K, amx_range<Packed::kQ6_K>);
  set(Packed::kQ2_K, amx_range<Packed::kQ2_K>);
  set(Packed::kQ3_K, amx_range<Packed::kQ3_K>);
  set(Packed::kTQ2_0, amx_range<Packed::kTQ2_0>);
  return t;
}

}  // namespace

const MatmulKernels& matmul_kernels_amx() {
  static const MatmulKernels table = make_table();
  return table;
}

}  // namespace tessera::kernels
