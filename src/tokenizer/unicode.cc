#include "tokenizer/unicode.h"

#include <algorithm>

#include "tokenizer/unicode_data.h"

namespace tessera::tok {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = b(pos);
  const size_t n = std::min(utf8_len(lead), s.size() - pos);
  uint32_t cp = n == 1 ? lead : n == 2 ? (lead & 0x1F) : n == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (b(pos + i) & 0x3F);
  pos += n;
  return cp;
}

namespace {

// Length of the well-formed sequence at s[pos], or 0 when ill-formed; on 0,
// `bad` is the length of the maximal subpart to replace with one U+FFFD.
size_t well_formed_at(std::string_view s, size_t pos, size_t& bad) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = b(pos);
  if (lead < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    bad = 1;
    return 0;
  }
  for (size_t i = 1; i <= need; ++i) {
    if (pos + i >= s.size() || b(pos + i) < lo || b(pos + i) > hi) {
      bad = i;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII runs are by far the common case.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t bad = 0;
    const size_t n = well_formed_at(s, pos, bad);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t bad = 0;
    const size_t n = well_formed_at(s, pos, bad);
    if (n > 0) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      append_utf8(out, kReplacementChar);
      pos += bad;
    }
  }
  return out;
}

namespace {

// Bytes that GPT-2 keeps as themselves: '!'..'~', '¡'..'¬', '®'..'ÿ'.
bool byte_is_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 256 + 68> to_byte{};  // code point -> byte, -1 when none
  std::array<std::string, 256> chars;
  ByteTables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = byte_is_printable(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
      append_utf8(chars[b], to_cp[b]);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return byte_tables().to_cp[b]; }

int code_point_to_byte(uint32_t cp) { return cp < 256 + 68 ? byte_tables().to_byte[cp] : -1; }

const std::array<std::string, 256>& byte_level_chars() { return byte_tables().chars; }

}  // namespace tessera::tok

// ---- BERT normaliser classes ---------------------------------------------------

namespace tessera::tok {
namespace {

bool in_ranges(const unicode_data::CodeRange* r, size_t n, uint32_t cp) {
  const auto* end = r + n;
  const auto* it = std::upper_bound(r, end, cp, [](uint32_t c, const unicode_data::CodeRange& x) {
    return c < x.first;
  });
  return it != r && cp <= (it - 1)->last;
}

}  // namespace

bool bert_is_whitespace(uint32_t cp) {
  // \t \n \r and the space separators (category Zs).
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool bert_is_control(uint32_t cp) {
  return in_ranges(unicode_data::kControl, unicode_data::kControlCount, cp);
}

bool bert_is_punctuation(uint32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)) {
    return true;
  }
  return cp >= 0x80 && in_ranges(unicode_data::kPunctuation, unicode_data::kPunctuationCount, cp);
}

bool bert_is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
         (cp >= 0x2B820 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void bert_lower_strip_accents(uint32_t cp, std::string& out) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) {
    // A Hangul syllable's NFD is its conjoining jamo (Unicode ch. 3.12); they
    // are letters, so nothing is stripped.
    const uint32_t s = cp - 0xAC00;
    append_utf8(out, 0x1100 + s / (21 * 28));
    append_utf8(out, 0x1161 + (s % (21 * 28)) / 28);
    if (s % 28 != 0) append_utf8(out, 0x11A7 + s % 28);
    return;
  }
  if (cp >= 0x300 && in_ranges(unicode_data::kNonspacingMark, unicode_data::kNonspacingMarkCount, cp)) return;
  const auto* end = unicode_data::kFold + unicode_data::kFoldCount;
  const auto* it = std::lower_bound(unicode_data::kFold, end, cp,
                                    [](const unicode_data::Fold& f, uint32_t c) { return f.cp < c; });
  if (it != end && it->cp == cp) {
    out.append(unicode_data::kFoldBytes + it->offset, it->length);
  } else {
    append_utf8(out, cp);
  }
}

}  // namespace tessera::tok
