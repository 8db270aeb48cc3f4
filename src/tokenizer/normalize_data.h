// Unicode normalization tables, generated from the Unicode character
// database by scripts/gen_unicode_normalize.py (the version is named at the
// top of tokenizer_normalize_data.cc). Every table is sorted by its key.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::tok::normalize_data {

struct CombiningClass {
  uint32_t first;
  uint32_t last;  // inclusive
  uint8_t ccc;    // canonical combining class, never 0 (absent: 0)
};
// A full (recursive, canonically ordered) decomposition of cp.
struct Decomposition {
  uint32_t cp;
  uint16_t offset;  // into kDecompositionPool
  uint8_t length;
};
// A primary composite: first + second compose to composite.
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const CombiningClass kCombiningClass[];
extern const size_t kCombiningClassCount;
extern const Decomposition kCanonical[];  // NFD(cp) != cp; Hangul syllables excepted (algorithmic)
extern const size_t kCanonicalCount;
extern const Decomposition kCompatibility[];  // NFKD(cp) != NFD(cp)
extern const size_t kCompatibilityCount;
extern const char32_t kDecompositionPool[];
extern const size_t kDecompositionPoolCount;
extern const Composition kComposition[];  // sorted by (first, second); Hangul excepted
extern const size_t kCompositionCount;

}  // namespace tessera::tok::normalize_data
