// AMX's tile configuration record, shared by the *_amx.cc kernels. Include
// only from them (internal linkage: docs/KERNELS.md, "ODR rule").
#pragma once

#include <cstdint>

namespace tessera::kernels {
namespace {

// Palette 1's 64-byte configuration (Intel SDM, LDTILECFG).
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

}  // namespace
}  // namespace tessera::kernels
