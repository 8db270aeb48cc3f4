// Sets of Unicode scalar values as sorted ranges, and their UTF-8 form as
// sequences of byte ranges: the alphabet of the regex lexer (grammar/lexer.h)
// is bytes, its patterns speak code points.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet of(uint32_t c) { return range(c, c); }
  static CodepointSet range(uint32_t lo, uint32_t hi);
  static CodepointSet all();  // every scalar value (surrogates excluded)

  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& other);
  CodepointSet complement() const;  // within all()
  CodepointSet intersect(const CodepointSet& other) const;
  CodepointSet minus(const CodepointSet& other) const { return intersect(other.complement()); }
  bool contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  // Canonical text, for interning lexemes ("61-7a,5f").
  std::string key() const;
  bool operator==(const CodepointSet& o) const { return ranges_ == o.ranges_; }

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // sorted, disjoint, inclusive
};

// One UTF-8 encoding shape: byte i lies in [first, second] of entry i.
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// The UTF-8 encodings of [lo, hi] (surrogates skipped) as a union of byte
// range sequences, each the product of its ranges (the construction RE2 and
// Rust's regex-syntax use: split until every continuation byte spans a
// whole 6-bit block or one value).
std::vector<ByteRanges> utf8_sequences(uint32_t lo, uint32_t hi);

void append_utf8(uint32_t c, std::string& out);

}  // namespace tessera::grammar
