// Unicode helpers for the tokenizers: UTF-8 iteration and validation, GPT-2's
// byte <-> unicode table, and the BERT normaliser's character classes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::tok {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for an ASCII or
// invalid lead byte). Only for text already known to be valid.
inline size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

void append_utf8(std::string& out, uint32_t cp);

// Decodes the character at `pos` of valid UTF-8 and advances `pos`.
uint32_t next_code_point(std::string_view s, size_t& pos);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values past
// U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with every maximal ill-formed subsequence replaced by U+FFFD (the
// Unicode/WHATWG "maximal subpart" rule).
std::string sanitize_utf8(std::string_view s);

// GPT-2 byte-level BPE maps each byte to one printable code point: the
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100...
uint32_t byte_to_code_point(uint8_t b);
// The byte a code point stands for, or -1 when it is not one of the 256.
int code_point_to_byte(uint32_t cp);
// The UTF-8 of byte_to_code_point(b) for every b.
const std::array<std::string, 256>& byte_level_chars();

// BERT's BasicTokenizer character classes (Unicode 14 tables).
bool bert_is_whitespace(uint32_t cp);   // ' ', \t, \n, \r or category Zs
bool bert_is_control(uint32_t cp);      // category C* other than \t \n \r
bool bert_is_punctuation(uint32_t cp);  // ASCII punctuation or category P*
bool bert_is_cjk(uint32_t cp);          // CJK Unified Ideographs blocks
// Appends cp lowercased with its accents removed (NFD without the
// non-spacing marks), as BERT's uncased normaliser does; may append nothing.
void bert_lower_strip_accents(uint32_t cp, std::string& out);

}  // namespace tessera::tok
