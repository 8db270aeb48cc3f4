// Unicode normalization forms (UAX #15) for tokenizer.json's NFC, NFD, NFKC
// and NFKD normalizers. The tables are Unicode 15.0 (Python 3.12's
// unicodedata); transformers.js uses its JavaScript engine's
// String.prototype.normalize (Node 20.20's ICU 78: Unicode 17.0). Forms
// differ between those versions only for characters whose decomposition or
// combining class is newer than 15.0 (none in tests/tokenizers/texts.json).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::tok {

enum class NormalForm : uint8_t { kNone, kNfc, kNfd, kNfkc, kNfkd };

// "NFC", "NFD", "NFKC", "NFKD" -> the form; kNone for any other name.
NormalForm normal_form_from_name(std::string_view name);

// `text` (valid UTF-8) in the normalization form: full decomposition
// (canonical, or compatibility for NFK*), canonical ordering of combining
// marks, and for NFC / NFKC canonical composition (primary composites only,
// Hangul algorithmically). kNone returns the text unchanged.
std::string normalize(std::string_view text, NormalForm form);

// The canonical combining class of cp (0 for starters).
uint8_t canonical_combining_class(uint32_t cp);

}  // namespace tessera::tok
