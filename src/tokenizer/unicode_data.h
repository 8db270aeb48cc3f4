// Character tables for BERT's normaliser, generated from the Unicode
// character database by scripts/gen_tokenizer_unicode.py.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::tok::unicode_data {

struct CodeRange {
  uint32_t first;
  uint32_t last;  // inclusive
};
// cp -> the UTF-8 of lowercase(NFD(cp) without non-spacing marks), for every
// cp where that differs from cp (Hangul syllables excepted: decomposed in code).
struct Fold {
  uint32_t cp;
  uint16_t offset;  // into kFoldBytes
  uint8_t length;
};

extern const CodeRange kControl[];  // categories C* except \t \n \r
extern const size_t kControlCount;
extern const CodeRange kNonspacingMark[];  // category Mn
extern const size_t kNonspacingMarkCount;
extern const CodeRange kPunctuation[];  // categories P*
extern const size_t kPunctuationCount;
extern const Fold kFold[];  // sorted by cp
extern const size_t kFoldCount;
extern const char kFoldBytes[];

}  // namespace tessera::tok::unicode_data
