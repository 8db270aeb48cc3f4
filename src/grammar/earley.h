// An Earley parser over lexemes (Earley 1970, with Aycock and Horspool's
// nullable-symbol fix), kept as a stack of item sets so that the token-mask
// walk can try a lexeme, look deeper, and take it back (push / pop), and so
// that a sequence rolls back rejected speculative tokens by popping.
//
// Each scan consumes a *set* of lexemes: the text the lexer just ended may be
// several lexemes at once (an enum value that is also a string), and the
// parser keeps every reading alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/grammar.h"

namespace tessera::grammar {

// The grammar flattened into dotted positions: immutable, shared.
struct EarleyTables {
  static constexpr int32_t kEnd = INT32_MIN;  // the dot is past the rule's end
  explicit EarleyTables(const Grammar& g);

  std::vector<int32_t> sym_at;  // per position: the symbol after the dot, or kEnd
  std::vector<int32_t> lhs_at;  // per position: its rule's left-hand side
  std::vector<std::vector<int32_t>> rule_starts;  // per nonterminal: first positions of its rules
  std::vector<uint8_t> nullable;                  // per nonterminal
  int32_t start_pos = 0;   // of the augmented rule S' -> start
  int32_t num_lexemes = 0;
};

class EarleyParser {
 public:
  explicit EarleyParser(std::shared_ptr<const EarleyTables> tables);

  // Advances over `lexemes` (sorted grammar-local ids): pushes a set and
  // returns true, or returns false and changes nothing when none is expected.
  bool scan(std::span<const int32_t> lexemes);
  void pop();  // drops the newest set (never the first)
  size_t num_sets() const { return set_begin_.size(); }
  void truncate(size_t num_sets) { while (set_begin_.size() > num_sets) pop(); }

  // Of the newest set: the lexemes that may come next (sorted), and whether
  // the text so far is a whole sentence.
  std::span<const int32_t> expected() const {
    return std::span(expected_).subspan(expected_begin_.back());
  }
  bool accepting() const { return accepting_.back() != 0; }
  size_t num_items() const { return items_.size(); }

 private:
  struct Item {
    int32_t pos, origin;
  };
  void add(int32_t pos, int32_t origin);
  void close();  // predict and complete the newest set, then note what it expects
  void clear_seen();

  std::shared_ptr<const EarleyTables> t_;
  std::vector<Item> items_;
  std::vector<uint32_t> set_begin_;
  std::vector<int32_t> expected_;
  std::vector<uint32_t> expected_begin_;
  std::vector<uint8_t> accepting_;
  // Scratch: an open-addressing set of the newest set's items, and lexeme
  // marks for scan.
  std::vector<uint64_t> seen_;
  size_t seen_count_ = 0;
  std::vector<uint32_t> lexeme_mark_;
  uint32_t generation_ = 0;
};

}  // namespace tessera::grammar
