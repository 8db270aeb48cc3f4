// IEEE half and bfloat16 conversions, scalar and bit-exact. These are the
// reference semantics; vector kernels use F16C/AVX-512 conversions, which
// round the same way (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera {

using fp16_t = uint16_t;  // raw IEEE 754 binary16 bits
using bf16_t = uint16_t;  // raw bfloat16 bits (top half of a binary32)

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float fp16_to_f32(fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_to_f32(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | mant << 13);  // inf / nan
  return bits_to_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

inline fp16_t f32_to_fp16(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan (keep nan quiet and non-zero)
    return static_cast<fp16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<fp16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half precision: value = abs / 2^-24.
    if (abs < 0x33000000u) return static_cast<fp16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 -> bits to drop beyond the 13
    const uint32_t drop = shift + 13 - 14 + 1;  // total bits dropped from 24-bit mantissa
    const uint32_t kept = m >> drop;
    const uint32_t rem = m & ((1u << drop) - 1);
    const uint32_t half = 1u << (drop - 1);
    uint32_t r = kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<fp16_t>(sign | r);
  }
  // Normal: rebias exponent, round mantissa to 10 bits (nearest even).
  const uint32_t rebased = abs - ((127u - 15u) << 23);
  const uint32_t kept = rebased >> 13;
  const uint32_t rem = rebased & 0x1fffu;
  const uint32_t r = kept + ((rem > 0x1000u || (rem == 0x1000u && (kept & 1u))) ? 1u : 0u);
  return static_cast<fp16_t>(sign | r);
}

inline float bf16_to_f32(bf16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

inline bf16_t f32_to_bf16(float f) {
  const uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 64u);  // quiet nan
  return static_cast<bf16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace tessera
