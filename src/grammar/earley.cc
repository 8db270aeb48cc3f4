#include "grammar/earley.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::grammar {

EarleyTables::EarleyTables(const Grammar& g) {
  const auto n = static_cast<size_t>(g.num_nonterminals());
  rule_starts.resize(n);
  nullable.assign(n, 0);
  num_lexemes = static_cast<int32_t>(g.lexemes.size());
  auto add_rule = [&](int32_t lhs, const std::vector<int32_t>& rhs) {
    const auto base = static_cast<int32_t>(sym_at.size());
    for (const int32_t s : rhs) {
      sym_at.push_back(s);
      lhs_at.push_back(lhs);
    }
    sym_at.push_back(kEnd);
    lhs_at.push_back(lhs);
    return base;
  };
  for (const auto& r : g.rules) rule_starts[static_cast<size_t>(r.lhs)].push_back(add_rule(r.lhs, r.rhs));
  // S' -> start. Its lhs must be no symbol at all: completing it must not
  // advance items that expect some lexeme (negative symbols).
  start_pos = add_rule(kEnd + 1, {g.start});
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& r : g.rules) {
      if (nullable[static_cast<size_t>(r.lhs)]) continue;
      bool all = true;
      for (const int32_t s : r.rhs) all = all && !is_lexeme(s) && nullable[static_cast<size_t>(s)];
      if (all) {
        nullable[static_cast<size_t>(r.lhs)] = 1;
        changed = true;
      }
    }
  }
}

EarleyParser::EarleyParser(std::shared_ptr<const EarleyTables> tables) : t_(std::move(tables)) {
  lexeme_mark_.assign(static_cast<size_t>(t_->num_lexemes), 0);
  set_begin_.push_back(0);
  clear_seen();
  add(t_->start_pos, 0);
  close();
}

void EarleyParser::clear_seen() {
  if (seen_.size() < 64) seen_.resize(64);
  std::fill(seen_.begin(), seen_.end(), ~uint64_t{0});
  seen_count_ = 0;
}

void EarleyParser::add(int32_t pos, int32_t origin) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(origin);
  if (2 * (seen_count_ + 1) > seen_.size()) {
    std::vector<uint64_t> old;
    old.swap(seen_);
    seen_.assign(old.size() * 2, ~uint64_t{0});
    const size_t m = seen_.size() - 1;
    for (const uint64_t k : old) {
      if (k == ~uint64_t{0}) continue;
      size_t h = (k * 0x9E3779B97F4A7C15ull) >> 17 & m;
      while (seen_[h] != ~uint64_t{0}) h = (h + 1) & m;
      seen_[h] = k;
    }
  }
  const size_t m = seen_.size() - 1;
  size_t h = (key * 0x9E3779B97F4A7C15ull) >> 17 & m;
  while (seen_[h] != ~uint64_t{0}) {
    if (seen_[h] == key) return;
    h = (h + 1) & m;
  }
  seen_[h] = key;
  ++seen_count_;
  items_.push_back({pos, origin});
}

void EarleyParser::close() {
  const auto k = static_cast<int32_t>(set_begin_.size() - 1);
  const EarleyTables& t = *t_;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item it = items_[i];
    const int32_t sym = t.sym_at[static_cast<size_t>(it.pos)];
    if (sym == EarleyTables::kEnd) {
      // Items that began here completed a nullable symbol, which every
      // prediction of it already stepped over.
      if (it.origin == k) continue;
      const int32_t lhs = t.lhs_at[static_cast<size_t>(it.pos)];
      const uint32_t b = set_begin_[static_cast<size_t>(it.origin)];
      const uint32_t e = set_begin_[static_cast<size_t>(it.origin) + 1];
      for (uint32_t j = b; j < e; ++j) {
        const Item w = items_[j];
        if (t.sym_at[static_cast<size_t>(w.pos)] == lhs) add(w.pos + 1, w.origin);
      }
    } else if (sym >= 0) {
      for (const int32_t p : t.rule_starts[static_cast<size_t>(sym)]) add(p, k);
      if (t.nullable[static_cast<size_t>(sym)]) add(it.pos + 1, it.origin);
    }
  }
  expected_begin_.push_back(static_cast<uint32_t>(expected_.size()));
  bool accepting = false;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item it = items_[i];
    const int32_t sym = t.sym_at[static_cast<size_t>(it.pos)];
    if (sym != EarleyTables::kEnd && sym < 0) expected_.push_back(~sym);
    if (it.pos == t.start_pos + 1 && it.origin == 0) accepting = true;
  }
  std::sort(expected_.begin() + expected_begin_.back(), expected_.end());
  expected_.erase(std::unique(expected_.begin() + expected_begin_.back(), expected_.end()), expected_.end());
  accepting_.push_back(accepting ? 1 : 0);
}

bool EarleyParser::scan(std::span<const int32_t> lexemes) {
  if (++generation_ == 0) {
    std::fill(lexeme_mark_.begin(), lexeme_mark_.end(), 0);
    generation_ = 1;
  }
  for (const int32_t l : lexemes) lexeme_mark_[static_cast<size_t>(l)] = generation_;
  const uint32_t b = set_begin_.back();
  const auto e = static_cast<uint32_t>(items_.size());
  set_begin_.push_back(e);
  clear_seen();
  for (uint32_t i = b; i < e; ++i) {
    const Item it = items_[i];
    const int32_t sym = t_->sym_at[static_cast<size_t>(it.pos)];
    if (sym != EarleyTables::kEnd && sym < 0 && lexeme_mark_[static_cast<size_t>(~sym)] == generation_) {
      add(it.pos + 1, it.origin);
    }
  }
  if (items_.size() == e) {
    set_begin_.pop_back();
    return false;
  }
  close();
  return true;
}

void EarleyParser::pop() {
  TESSERA_ASSERT(set_begin_.size() > 1);
  items_.resize(set_begin_.back());
  set_begin_.pop_back();
  expected_.resize(expected_begin_.back());
  expected_begin_.pop_back();
  accepting_.pop_back();
}

}  // namespace tessera::grammar
