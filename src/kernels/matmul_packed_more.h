// Packed tiles of issue 35's super-block types (layouts in
// matmul_kernels.h), lane r = row r as the other packed tiles: the exact
// int32 sums of the contract (matmul_fmt_more.h), then the same float steps
// as the plain-row kernels, so the same bits. Included by matmul_impl.h
// inside its anonymous namespace, after packed_frame.
#pragma once

// ---- IQ4_XS: levels by vpshufb, a signed 6-bit scale per sub-block of 32 ------
// Per sub-block s the dot of the levels (D's signed dot: on VNNI the levels
// offset by 128, taken out below) times the rows' scales (vpmulld) into the
// super-block's exact sum: |sum| <= 8 * 32 * 32 * 127 * 127 < 2^31 - 1.
template <class D, int T, int G, int kPrefetch>
static inline void iq4xs_tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x,
                              float* const* y, int nvalid) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i lut = _mm256_broadcastsi128_si256(loadu128(kIQ4Values));
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    for (int g = 0; g < G; ++g) {
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    for (int s = 0; s < 8; ++s) {
      __m256i part[G][T];
      for (int g = 0; g < G; ++g) {
        for (int t = 0; t < T; ++t) part[g][t] = _mm256_setzero_si256();
      }
      for (int h = 0; h < 4; ++h) {
        __m256i xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
          xl[t] = bcast4(x[t].q + b * 256 + 32 * s + 4 * h);
          xh[t] = bcast4(x[t].q + b * 256 + 32 * s + 16 + 4 * h);
        }
        for (int g = 0; g < G; ++g) {
          const __m256i v = loadu256(blk[g] + 80 + 128 * s + 32 * h);
          const typename D::Q8 lo = D::q8_prep(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4)));
          const typename D::Q8 hi = D::q8_prep(_mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
          for (int t = 0; t < T; ++t) {
            part[g][t] = D::q8_dot_acc(part[g][t], lo, xl[t]);
            part[g][t] = D::q8_dot_acc(part[g][t], hi, xh[t]);
          }
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m256i ls = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk[g] + 16 + 8 * s)));
        for (int t = 0; t < T; ++t) isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_mullo_epi32(part[g][t], ls));
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 wd = _mm256_cvtph_ps(loadu128(blk[g]));
      for (int t = 0; t < T; ++t) {
        __m256i v = isum[g][t];
        if constexpr (D::kQ8Offset != 0) {  // - 128 * sum_s ls_s * sum(x_s)
          const int16_t* xs = x[t].sum + b * 8;
          __m256i corr = _mm256_setzero_si256();
          for (int s = 0; s < 8; ++s) {
            const __m256i ls =
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk[g] + 16 + 8 * s)));
            corr = _mm256_add_epi32(corr, _mm256_mullo_epi32(ls, _mm256_set1_epi32(xs[s])));
          }
          v = _mm256_sub_epi32(v, _mm256_mullo_epi32(corr, _mm256_set1_epi32(D::kQ8Offset)));
        }
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(wd, _mm256_set1_ps(x[t].d[b])), acc[g][t]);
      }
    }
  };
  packed_frame<T, G, kPackedIQ4_XSBlock, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

// ---- Q2_K: 2-bit values, a 4-bit scale and min per sub-block of 16 -------------
// Per sub-block the exact dot of the values (0..3) in int32 lanes times the
// rows' scales (vpmulld); the min term sum_s m_s * sum(x_s) the same way
// from the token's 16 group sums. Both below 16 * 15 * 16 * 3 * 127 < 2^21.
template <class D, int T, int G, int kPrefetch>
static inline void q2tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                          int nvalid) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const auto lanes = [](const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  };
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    for (int g = 0; g < G; ++g) {
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    // Values 128 n + 32 j + 4 q + i (q < 8), sub-block 8 n + 2 j + q / 4.
    for (int n = 0; n < 2; ++n) {
      for (int half = 0; half < 2; ++half) {
        __m256i part[G][4][T];
        for (int g = 0; g < G; ++g) {
          for (int j = 0; j < 4; ++j) {
            for (int t = 0; t < T; ++t) part[g][j][t] = _mm256_setzero_si256();
          }
        }
        for (int q = 4 * half; q < 4 * half + 4; ++q) {
          for (int g = 0; g < G; ++g) {
            const __m256i v = loadu256(blk[g] + 288 + 256 * n + 32 * q);
            for (int j = 0; j < 4; ++j) {
              const __m256i u = _mm256_and_si256(j == 0 ? v : _mm256_srli_epi16(v, 2 * j), m3);
              for (int t = 0; t < T; ++t) {
                part[g][j][t] = D::u4_dot_acc(part[g][j][t], u, bcast4(x[t].q + b * 256 + 128 * n + 32 * j + 4 * q));
              }
            }
          }
        }
        for (int g = 0; g < G; ++g) {
          for (int j = 0; j < 4; ++j) {
            const __m256i sc = lanes(blk[g] + 32 + 8 * (8 * n + 2 * j + half));
            for (int t = 0; t < T; ++t) isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_mullo_epi32(part[g][j][t], sc));
          }
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 wd = _mm256_cvtph_ps(loadu128(blk[g])), wm = _mm256_cvtph_ps(loadu128(blk[g] + 16));
      for (int t = 0; t < T; ++t) {
        const int16_t* xs = x[t].sum + b * 16;
        __m256i msum = _mm256_setzero_si256();
        for (int s = 0; s < 16; ++s) {
          msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(lanes(blk[g] + 160 + 8 * s), _mm256_set1_epi32(xs[s])));
        }
        const __m256 dx = _mm256_set1_ps(x[t].d[b]);
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g][t]), _mm256_mul_ps(wd, dx), acc[g][t]);
        acc[g][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(wm, dx), acc[g][t]);
      }
    }
  };
  packed_frame<T, G, kPackedQ2_KBlock, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}

// ---- TQ2_0 and TQ1_0: ternary t in 0..2 as 2-bit values ------------------------
// Q2_K's packed value order without scales (TQ1_0's base-3 digits are
// re-coded to 2 bits at load): the exact dot of t with x in int32 lanes,
// minus sum(x) for the -1, then one fma per 256 values.
template <class D, int T, int G, int kPrefetch>
static inline void tq2tile(const uint8_t* group, size_t group_bytes, int64_t nb, const ActPtrs* x, float* const* y,
                           int nvalid) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const auto block = [&](const uint8_t* const* blk, int64_t b, __m256(&acc)[G][T]) __attribute__((always_inline)) {
    __m256i isum[G][T];
    for (int g = 0; g < G; ++g) {
      for (int t = 0; t < T; ++t) isum[g][t] = _mm256_setzero_si256();
    }
    for (int n = 0; n < 2; ++n) {
      for (int q = 0; q < 8; ++q) {
        for (int g = 0; g < G; ++g) {
          const __m256i v = loadu256(blk[g] + 16 + 256 * n + 32 * q);
          for (int j = 0; j < 4; ++j) {
            const __m256i u = _mm256_and_si256(j == 0 ? v : _mm256_srli_epi16(v, 2 * j), m3);
            for (int t = 0; t < T; ++t) {
              isum[g][t] = D::u4_dot_acc(isum[g][t], u, bcast4(x[t].q + b * 256 + 128 * n + 32 * j + 4 * q));
            }
          }
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m256 wd = _mm256_cvtph_ps(loadu128(blk[g]));
      for (int t = 0; t < T; ++t) {
        const __m256i v = _mm256_sub_epi32(isum[g][t], _mm256_set1_epi32(sum_groups(x[t].sum + b * 8, 8)));
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(wd, _mm256_set1_ps(x[t].d[b])), acc[g][t]);
      }
    }
  };
  packed_frame<T, G, kPackedTQ2_0Block, kPrefetch>(group, group_bytes, nb, y, nvalid, block);
}
