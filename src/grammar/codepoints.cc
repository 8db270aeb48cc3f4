#include "grammar/codepoints.h"

#include <algorithm>

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace tessera::grammar {

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

CodepointSet CodepointSet::all() {
  CodepointSet s;
  s.ranges_ = {{0, 0xD7FF}, {0xE000, kMaxCodepoint}};
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return;
  ranges_.emplace_back(lo, hi);
  normalize();
}

void CodepointSet::add(const CodepointSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CodepointSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& r : ranges_) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  // Surrogates are not scalar values: no UTF-8 text holds them.
  std::vector<std::pair<uint32_t, uint32_t>> cut;
  for (const auto& [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      cut.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) cut.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
  }
  ranges_ = std::move(cut);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet s;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) s.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) s.ranges_.emplace_back(next, kMaxCodepoint);
  s.normalize();
  return s;
}

CodepointSet CodepointSet::intersect(const CodepointSet& other) const {
  CodepointSet s;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    const uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) s.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) ++i; else ++j;
  }
  return s;
}

bool CodepointSet::contains(uint32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(c, kMaxCodepoint + 1));
  return it != ranges_.begin() && std::prev(it)->second >= c;
}

std::string CodepointSet::key() const {
  std::string k;
  for (const auto& [lo, hi] : ranges_) {
    if (!k.empty()) k += ',';
    k += lo == hi ? fmt::format("{:x}", lo) : fmt::format("{:x}-{:x}", lo, hi);
  }
  return k;
}

void append_utf8(uint32_t c, std::string& out) { tok::append_utf8(out, c); }

namespace {

int utf8_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void split(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  // One encoded length per piece.
  for (const uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      split(lo, edge, out);
      split(edge + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  // Continuation bytes must span whole blocks (or one value) for the product
  // of ranges to be exact.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  ByteRanges seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<ByteRanges> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRanges> out;
  const CodepointSet s = CodepointSet::range(lo, hi);
  for (const auto& [a, b] : s.ranges()) split(a, b, out);
  return out;
}

}  // namespace tessera::grammar
