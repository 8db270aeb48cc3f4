#include "tokenizer/normalize.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "tokenizer/normalize_data.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {
namespace {

namespace data = normalize_data;

// Hangul syllables (Unicode 15.0, section 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const data::Decomposition* find_decomposition(const data::Decomposition* table, size_t n, uint32_t cp) {
  const data::Decomposition* end = table + n;
  const auto* it = std::lower_bound(table, end, cp, [](const data::Decomposition& d, uint32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

// Appends the full decomposition of cp.
void decompose(uint32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp - kSBase < kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  // U+00A0 is the first character with a compatibility decomposition, U+00C0
  // the first with a canonical one.
  if (cp >= 0xA0) {
    const data::Decomposition* d =
        compat ? find_decomposition(data::kCompatibility, data::kCompatibilityCount, cp) : nullptr;
    if (d == nullptr && cp >= 0xC0) d = find_decomposition(data::kCanonical, data::kCanonicalCount, cp);
    if (d != nullptr) {
      out.insert(out.end(), data::kDecompositionPool + d->offset, data::kDecompositionPool + d->offset + d->length);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of a + b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a - kLBase < kLCount && b - kVBase < kVCount) return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - kTBase - 1 < kTCount - 1) return a + (b - kTBase);
  const data::Composition* end = data::kComposition + data::kCompositionCount;
  const auto* it = std::lower_bound(data::kComposition, end, std::pair(a, b), [](const data::Composition& c, auto key) {
    return c.first < key.first || (c.first == key.first && c.second < key.second);
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

NormalForm normal_form_from_name(std::string_view name) {
  if (name == "NFC") return NormalForm::kNfc;
  if (name == "NFD") return NormalForm::kNfd;
  if (name == "NFKC") return NormalForm::kNfkc;
  if (name == "NFKD") return NormalForm::kNfkd;
  return NormalForm::kNone;
}

uint8_t canonical_combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const data::CombiningClass* end = data::kCombiningClass + data::kCombiningClassCount;
  const auto* it =
      std::upper_bound(data::kCombiningClass, end, cp, [](uint32_t c, const data::CombiningClass& r) { return c < r.first; });
  if (it == data::kCombiningClass) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string normalize(std::string_view text, NormalForm form) {
  // ASCII is in every form.
  if (form == NormalForm::kNone ||
      std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  const bool compat = form == NormalForm::kNfkc || form == NormalForm::kNfkd;
  std::vector<char32_t> buf;
  buf.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) decompose(next_code_point(text, pos), compat, buf);

  // Canonical ordering: each run of non-starters stably sorted by class
  // (stable_sort, not pairwise swaps: a run may be thousands of marks long).
  std::vector<uint8_t> ccc(buf.size());
  for (size_t i = 0; i < buf.size(); ++i) ccc[i] = canonical_combining_class(buf[i]);
  std::vector<std::pair<uint8_t, char32_t>> run;
  for (size_t i = 0; i < buf.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buf.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      run.clear();
      for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], buf[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (size_t k = i; k < j; ++k) std::tie(ccc[k], buf[k]) = run[k - i];
    }
    i = j;
  }

  if (form == NormalForm::kNfc || form == NormalForm::kNfkc) {
    // Canonical composition: a character composes with the last starter
    // unless a character between them has a class of 0 or >= its own.
    size_t n = 0;  // buf[0, n) is the composed text
    size_t starter = SIZE_MAX;
    uint8_t last_ccc = 0;  // of buf[n - 1] when it is not the starter
    for (size_t i = 0; i < buf.size(); ++i) {
      const char32_t c = buf[i];
      const uint8_t cc = ccc[i];
      if (starter != SIZE_MAX && (n - 1 == starter || last_ccc < cc)) {
        if (const uint32_t composite = compose(buf[starter], c)) {
          buf[starter] = composite;
          continue;
        }
      }
      if (cc == 0) starter = n;
      last_ccc = cc;
      buf[n++] = c;
    }
    buf.resize(n);
  }

  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (const char32_t c : buf) append_utf8(out, c);
  return out;
}

}  // namespace tessera::tok
