// Tensor element types, numbered as GGUF/ggml number them (the file format is
// the contract). Block-quantized types pack `block_size` elements into
// `type_size` bytes; see kernels/blocks.h for the layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  // Tessera's own: QMoE's entropy-coded ternary experts (kernels/qmoe.h,
  // docs/FORMATS.md). Variable size: its bytes say how many they are.
  // ggml has no type of this number, so llama.cpp refuses such a file,
  // naming the tensor.
  kQMoE = 4096,
  // Tessera's own: pruned matrices as a bitmask and the kept values
  // (kernels/sparse.h, docs/FORMATS.md "SPRS"), Q8_0 or Q4_0 values.
  // Variable size, like QMOE.
  kSpQ8_0 = 4097,
  kSpQ4_0 = 4098,
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_size;  // elements per block (1 for plain types)
  size_t type_size;    // bytes per block
};

// Layout of a type GGUF defines, or nullopt for a number no GGUF type has.
std::optional<DTypeTraits> dtype_traits(uint32_t raw_type);
DTypeTraits dtype_traits(DType t);  // t must be a defined type

std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);  // "f32", "q8_0", ...

// Whether a tensor of type t has a size fixed by its shape (every GGUF type),
// or carries its own (QMOE, SP_Q8_0, SP_Q4_0).
inline bool dtype_fixed_size(DType t) { return t != DType::kQMoE && t != DType::kSpQ8_0 && t != DType::kSpQ4_0; }

// Bytes used by a row of n elements (n must be a multiple of the block size).
inline size_t row_bytes(DType t, int64_t n) {
  const DTypeTraits tr = dtype_traits(t);
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace tessera
