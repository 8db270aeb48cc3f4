// The formats issue 35 added to the quantized tile (qtile8 in
// matmul_impl.h): Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (blocks of 32) and Q2_K,
// IQ4_XS, TQ1_0, TQ2_0 (super-blocks of 256). Each decodes its bytes into
// the integers of the format's definition and forms the exact integer sums
// of the contract in matmul_kernels.h:
//   Q4_1, Q5_1:  sum 0 = sum q * x, sum 1 = -sum x (so the contract's
//                "acc - msum * fl(m * dx)" adds m * sum x: w = d q + m)
//   Q5_0:        sum (q - 16) * x
//   IQ4_NL:      sum level(q) * x          MXFP4: sum 2 * E2M1(q) * x
//   Q2_K:        sum 0 = sum_s (sc_s & 15) * sum q * x,
//                sum 1 = sum_s (sc_s >> 4) * sum_s x        (groups of 16)
//   IQ4_XS:      sum_s (ls_s - 32) * sum level(q) * x       (groups of 32)
//   TQ1_0, TQ2_0: sum (t - 1) * x
// Included by matmul_impl.h inside its anonymous namespace (internal
// linkage, ODR rule of docs/KERNELS.md).
#pragma once

// The fifth bits of a Q5_0 / Q5_1 block (32-bit qh: bit i = value i) as
// bytes of 0x10 or 0, in value order.
static inline __m256i q5_fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// The 32 nibbles of a 16-byte Q4_0-order block as bytes in value order.
static inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i v = loadu128(qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

// The sum of n int16 group sums.
static inline int sum_groups(const int16_t* xs, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += xs[i];
  return s;
}

// A lane vector holding v in lane 0.
static inline __m256i lane0(int v) { return _mm256_setr_epi32(v, 0, 0, 0, 0, 0, 0, 0); }

// Q4_1 (kFifth = false) and Q5_1: unsigned q, the min through sum 1.
template <class D, bool kFifth>
struct FmtAffine32 {
  static constexpr int kBlock = 32, kBytes = kFifth ? 24 : 20, kSums = 2;
  static constexpr size_t kScaleOffset[2] = {0, 2};
  using Prep = __m256i;
  static Prep prep(const uint8_t* blk) {
    if constexpr (kFifth) return _mm256_or_si256(nibbles32(blk + 8), q5_fifth_bits(blk + 4));
    return nibbles32(blk + 4);
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    out[0] = D::u4_dot(p, loadu256(xq));  // q <= 31: vpmaddubsw pairs within 2 * 31 * 127
    out[1] = lane0(-xs[0]);
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// Q5_0: unsigned q, the -16 through the token's sum.
template <class D>
struct FmtQ5_0 {
  static constexpr int kBlock = 32, kBytes = 22, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {0};
  using Prep = __m256i;
  static Prep prep(const uint8_t* blk) { return _mm256_or_si256(nibbles32(blk + 6), q5_fifth_bits(blk + 2)); }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) {
    out[0] = D::u4_dot(p, loadu256(xq));
  }
  static __m256i post(__m256i s, const int16_t* xs) { return _mm256_sub_epi32(s, _mm256_set1_epi32(16 * xs[0])); }
};

// IQ4_NL and MXFP4: a 16-entry int8 table looked up by nibble, then Q8_0's
// signed dot (and its offset correction). kE8M0: the block scale is MXFP4's
// exponent byte (see load_wscale), not an fp16.
template <class D, bool kMx>
struct FmtLut32 {
  static constexpr int kBlock = 32, kBytes = kMx ? 17 : 18, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {0};
  static constexpr bool kE8M0 = kMx;
  using Prep = typename D::Q8;
  static Prep prep(const uint8_t* blk) {
    const __m256i lut = _mm256_broadcastsi128_si256(loadu128(kMx ? kMXFP4Values : kIQ4Values));
    return D::q8_prep(_mm256_shuffle_epi8(lut, nibbles32(blk + (kMx ? 1 : 2))));
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) { out[0] = D::q8_dot(p, loadu256(xq)); }
  static __m256i post(__m256i s, const int16_t* xs) { return FmtQ8_0<D>::post(s, xs); }
};

// Q2_K: Q3_K's 2-bit low values with a 4-bit scale and min per sub-block of 16.
struct FmtQ2_K {
  static constexpr int kBlock = 256, kBytes = 84, kSums = 2;
  static constexpr size_t kScaleOffset[2] = {80, 82};
  struct Prep {
    const uint8_t* qs;
    __m256i sc16, m16;  // the 16 scales / mins as int16
    __m256i scv[8];     // for value vector v: [sc[2v] x 8 | sc[2v+1] x 8]
  };
  static Prep prep(const uint8_t* blk) {
    const __m128i s = loadu128(blk);
    Prep p = prep_scales(_mm_and_si128(s, _mm_set1_epi8(15)));
    p.qs = blk + 16;
    p.m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15)));
    return p;
  }
  static Prep prep_scales(__m128i s8) {
    const FmtQ6_K::Prep q6 = FmtQ6_K::prep_scales(nullptr, s8);
    Prep p;
    p.sc16 = q6.sc16;
    for (int v = 0; v < 8; ++v) p.scv[v] = q6.scv[v];
    return p;
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i qs = loadu256(p.qs + 32 * n);
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
        const __m256i pr = _mm256_maddubs_epi16(q, loadu256(xq + 128 * n + 32 * j));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pr, p.scv[4 * n + j]));
      }
    }
    out[0] = acc;
    out[1] = _mm256_madd_epi16(p.m16, loadu256(xs));  // sum_s m_s * sum(x_s)
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// IQ4_XS: levels by nibble, a signed 6-bit scale per sub-block of 32.
template <class D>
struct FmtIQ4_XS {
  static constexpr int kBlock = 256, kBytes = 136, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {0};
  struct Prep {
    const uint8_t* qs;
    int32_t ls[8];
  };
  static Prep prep(const uint8_t* blk) {
    Prep p;
    uint16_t h;
    std::memcpy(&h, blk + 2, 2);
    for (int s = 0; s < 8; ++s) {
      p.ls[s] = (((blk[4 + s / 2] >> (4 * (s % 2))) & 15) | (((h >> (2 * s)) & 3) << 4)) - 32;
    }
    p.qs = blk + 8;
    return p;
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t* xs, __m256i* out) {
    const __m256i lut = _mm256_broadcastsi128_si256(loadu128(kIQ4Values));
    __m256i acc = _mm256_setzero_si256();
    int corr = 0;
    for (int s = 0; s < 8; ++s) {
      const typename D::Q8 w = D::q8_prep(_mm256_shuffle_epi8(lut, nibbles32(p.qs + 16 * s)));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(D::q8_dot(w, loadu256(xq + 32 * s)), _mm256_set1_epi32(p.ls[s])));
      corr += p.ls[s] * xs[s];
    }
    // q8_dot's offset (D::kQ8Offset * sum x per sub-block), times the scales.
    out[0] = D::kQ8Offset == 0 ? acc : _mm256_sub_epi32(acc, lane0(D::kQ8Offset * corr));
  }
  static __m256i post(__m256i s, const int16_t*) { return s; }
};

// TQ2_0: q in 0..3 (Q2_K's order), the -1 through the token's sums.
template <class D>
struct FmtTQ2_0 {
  static constexpr int kBlock = 256, kBytes = 66, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {64};
  using Prep = const uint8_t*;
  static Prep prep(const uint8_t* blk) { return blk; }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) {
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i qs = loadu256(p + 32 * n);
      for (int j = 0; j < 4; ++j) {
        acc = D::u4_dot_acc(acc, _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3), loadu256(xq + 128 * n + 32 * j));
      }
    }
    out[0] = acc;
  }
  // Groups of 32: 8 per block.
  static __m256i post(__m256i s, const int16_t* xs) { return _mm256_sub_epi32(s, _mm256_set1_epi32(sum_groups(xs, 8))); }
};

// TQ1_0: the base-3 digits of each byte decoded once per row block into
// t = 0..2 in value order, then TQ2_0's dot.
template <class D>
struct FmtTQ1_0 {
  static constexpr int kBlock = 256, kBytes = 54, kSums = 1;
  static constexpr size_t kScaleOffset[1] = {52};
  struct Prep {
    alignas(32) uint8_t t[256];
  };
  // Digit n of each byte of v: ((v * 3^n mod 256) * 3) >> 8, in 16-bit
  // lanes (even and odd bytes apart, so no product carries into a neighbour).
  static __m256i digits(__m256i v, int pow3) {
    const __m256i p = _mm256_set1_epi16(static_cast<short>(pow3)), ff = _mm256_set1_epi16(0xff);
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(v, ff), p), ff);
    const __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), p), ff);
    const __m256i three = _mm256_set1_epi16(3);
    const __m256i dlo = _mm256_srli_epi16(_mm256_mullo_epi16(lo, three), 8);
    const __m256i dhi = _mm256_srli_epi16(_mm256_mullo_epi16(hi, three), 8);
    return _mm256_or_si256(dlo, _mm256_slli_epi16(dhi, 8));
  }
  static Prep prep(const uint8_t* blk) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    Prep p;
    const __m256i a = loadu256(blk);
    for (int n = 0; n < 5; ++n) _mm256_store_si256(reinterpret_cast<__m256i*>(p.t + 32 * n), digits(a, kPow3[n]));
    // Bytes 32..47 (digits n -> values 160 + 16 n) and qh (48..51: digits n
    // < 4 -> values 240 + 4 n): 20 bytes, read as 32 with the block's last
    // 12 bytes masked off by what is stored.
    alignas(32) uint8_t b[32] = {};
    std::memcpy(b, blk + 32, 20);
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
    alignas(32) uint8_t dg[5][32];
    for (int n = 0; n < 5; ++n) _mm256_store_si256(reinterpret_cast<__m256i*>(dg[n]), digits(v, kPow3[n]));
    for (int n = 0; n < 5; ++n) std::memcpy(p.t + 160 + 16 * n, dg[n], 16);
    for (int n = 0; n < 4; ++n) std::memcpy(p.t + 240 + 4 * n, dg[n] + 16, 4);
    return p;
  }
  static void dot(const Prep& p, const int8_t* xq, const int16_t*, __m256i* out) {
    __m256i acc = _mm256_setzero_si256();
    for (int v = 0; v < 8; ++v) {
      acc = D::u4_dot_acc(acc, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.t + 32 * v)), loadu256(xq + 32 * v));
    }
    out[0] = acc;
  }
  static __m256i post(__m256i s, const int16_t* xs) { return _mm256_sub_epi32(s, _mm256_set1_epi32(sum_groups(xs, 8))); }
};

// The 8 rows' weight scales of sum s at byte `off` of their blocks: fp16,
// or MXFP4's E8M0 exponent as 2^(e - 128) (e < 2: the subnormals).
static inline float e8m0_half_f(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : (e == 0 ? 0x00200000u : 0x00400000u);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
template <class Fmt>
static inline __m256 load_wscale(const uint8_t* const* rows, size_t off) {
  if constexpr (requires { Fmt::kE8M0; }) {
    if constexpr (Fmt::kE8M0) {
      return _mm256_setr_ps(e8m0_half_f(rows[0][off]), e8m0_half_f(rows[1][off]), e8m0_half_f(rows[2][off]),
                            e8m0_half_f(rows[3][off]), e8m0_half_f(rows[4][off]), e8m0_half_f(rows[5][off]),
                            e8m0_half_f(rows[6][off]), e8m0_half_f(rows[7][off]));
    }
  }
  return gather_f16x8(rows, off);
}
