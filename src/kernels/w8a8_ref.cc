// The scalar reference of the W8A8 kernels (w8a8_kernels.h): the integer
// dot formed directly as sum(a * q), then the two float multiplies. The
// vector kernels must agree with it bit for bit.
#pragma GCC optimize("fp-contract=off")
#include <cmath>

#include "kernels/w8a8_kernels.h"

namespace tessera::kernels {
namespace {

float quantize_ref(const float* x, int64_t cols, int64_t cols4, float amax_floor, uint8_t* act) {
  float amax = amax_floor > 0.0f ? amax_floor : 0.0f;
  for (int64_t k = 0; k < cols; ++k) {
    const float v = std::fabs(x[k]);
    if (v > amax) amax = v;  // a NaN never compares greater
  }
  const float sx = amax / 127.0f;
  const float id = sx != 0.0f ? 1.0f / sx : 0.0f;
  for (int64_t k = 0; k < cols; ++k) {
    float v = std::nearbyint(x[k] * id);
    if (!(v == v)) v = 0.0f;  // NaN (or inf * 0)
    v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
    act[k] = static_cast<uint8_t>(static_cast<int32_t>(v) + 128);
  }
  for (int64_t k = cols; k < cols4 * 4; ++k) act[k] = 128;
  return sx;
}

void run_ref(const W8A8Args& a, int64_t g0, int64_t g1, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* act = a.act + t * a.act_stride;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t i = 0; i < kW8Group; ++i) {
        const int64_t r = g * kW8Group + i;
        if (r >= a.rows) break;
        int32_t acc = 0;
        for (int64_t c = 0; c < a.cols4; ++c) {
          const int8_t* q = a.q + ((g * a.cols4 + c) * kW8Group + i) * 4;
          for (int j = 0; j < 4; ++j) acc += (static_cast<int32_t>(act[4 * c + j]) - 128) * q[j];
        }
        a.y[t * a.y_stride + r] = static_cast<float>(acc) * a.sx[t] * a.sw[r];
      }
    }
  }
}

constexpr W8A8Kernels kTable = {"scalar", run_ref, quantize_ref, w4_unpack_ref, nullptr};

}  // namespace

const W8A8Kernels& w8a8_kernels_ref() { return kTable; }

void w4_unpack_ref(const uint8_t* nib, int64_t cols4, int8_t* q) {
  for (int64_t c = 0; c < cols4; ++c) {
    const uint8_t* src = nib + (c / 2) * kW8Group * 4;
    for (int64_t b = 0; b < kW8Group * 4; ++b) {
      const int code = c % 2 == 0 ? src[b] & 15 : src[b] >> 4;
      q[c * kW8Group * 4 + b] = static_cast<int8_t>(code - 8);
    }
  }
}

}  // namespace tessera::kernels
