// W8A8 on AMX-INT8 (compiled with the AVX-512 flags plus -mamx-tile
// -mamx-int8 by the *_amx.cc rule; used only where amx_usable()). The
// packed weights of a row group are B tiles as they lie: 16 rows of 4
// columns per 64 bytes, 16 of those (64 columns) per tile. Per 32 tokens x
// 32 rows, four C tiles hold int32 sums over the whole row: two A tiles (16
// tokens x 64 activation bytes, a + 128) and two B tiles feed four
// TDPBUSD per 64 columns, and the C tiles are stored once at the end, so
// the float step is once per output as on every ISA (w8a8_kernels.h) and
// the bits are the AVX-512 kernel's. Fewer than 32 tokens, a lone last row
// group, or columns not a multiple of 64 go to the AVX-512 kernel.
#include <immintrin.h>

#include <cstdint>

#include "kernels/amx_tile.h"
#include "kernels/w8a8_kernels.h"

namespace tessera::kernels {
namespace {

// Tiles 0-3: C (16 tokens x 16 int32); 4-5: A (16 tokens x 64 bytes); 6-7:
// B (16 rows of 4-column groups x 64 bytes).
constexpr TileConfig make_config() {
  TileConfig c{};
  c.palette = 1;
  for (int i = 0; i < 8; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  return c;
}
constexpr TileConfig kConfig = make_config();

// 32 tokens from t x row groups g, g + 1: the whole row's sums, then y.
void block_32x32(const W8A8Args& a, int64_t g, int64_t t) {
  const int64_t gstride = a.cols4 * kW8Group * 4;
  const int8_t* w0 = a.q + g * gstride;
  const int8_t* w1 = w0 + gstride;
  const uint8_t* x0 = a.act + t * a.act_stride;
  const uint8_t* x1 = x0 + 16 * a.act_stride;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < a.cols4; c += 16) {
    _tile_loadd(4, x0 + 4 * c, a.act_stride);
    _tile_loadd(5, x1 + 4 * c, a.act_stride);
    _tile_loadd(6, w0 + c * 64, 64);
    _tile_loadd(7, w1 + c * 64, 64);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  alignas(64) int32_t sums[4][16 * 16];
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  _tile_stored(3, sums[3], 64);
  for (int tb = 0; tb < 2; ++tb) {
    for (int gb = 0; gb < 2; ++gb) {
      const int64_t r0 = (g + gb) * kW8Group, left = a.rows - r0;
      if (left <= 0) continue;
      const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
      const __m512i ws = _mm512_loadu_si512(a.wsum128 + r0);
      const __m512 sw = _mm512_loadu_ps(a.sw + r0);
      const int32_t* s = sums[2 * tb + gb];
      for (int i = 0; i < 16; ++i) {
        const int64_t tok = t + 16 * tb + i;
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(s + 16 * i), ws));
        _mm512_mask_storeu_ps(a.y + tok * a.y_stride + r0, m, _mm512_mul_ps(_mm512_mul_ps(f, _mm512_set1_ps(a.sx[tok])), sw));
      }
    }
  }
}

void run_amx(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  const W8A8Fn vnni = w8a8_kernels_avx512().run;
  if (a.cols4 % 16 != 0 || t1 - t0 < 32) return vnni(a, g0, g1, t0, t1);
  const int64_t t_end = t0 + (t1 - t0) / 32 * 32, g_end = g0 + (g1 - g0) / 2 * 2;
  _tile_loadconfig(&kConfig);
  for (int64_t g = g0; g < g_end; g += 2) {
    for (int64_t t = t0; t < t_end; t += 32) block_32x32(a, g, t);
  }
  _tile_release();
  if (g_end < g1) vnni(a, g_end, g1, t0, t_end);
  if (t_end < t1) vnni(a, g0, g1, t_end, t1);
}

float quantize_amx(const float* x, int64_t cols, int64_t cols4, float amax_floor, uint8_t* act) {
  return w8a8_kernels_avx512().quantize(x, cols, cols4, amax_floor, act);
}

void unpack4_amx(const uint8_t* nib, int64_t cols4, int8_t* q) { w8a8_kernels_avx512().unpack4(nib, cols4, q); }
void run4_amx(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  w8a8_kernels_avx512().run4(a, g0, g1, t0, t1);
}

constexpr W8A8Kernels kTable = {"amx", run_amx, quantize_amx, unpack4_amx, run4_amx};

}  // namespace

const W8A8Kernels& w8a8_kernels_amx() { return kTable; }

}  // namespace tessera::kernels
