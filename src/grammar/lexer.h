// The lexer of structured output: every lexeme (a Regex) of every grammar in
// one byte-level NFA, and one lazily built DFA over it. A DFA state is a set
// of NFA states, so it does not depend on which grammar reached it: the
// state "inside a JSON string" is one state for every schema, and the token
// masks cached per state (grammar/token_mask.h) are shared by all of them.
//
// A lexeme never matches the empty string: its start is a fresh NFA state
// holding only the byte edges of the regex's start closure, which removes
// "" from the language (grammars write an optional lexeme as L | ε). States
// that cannot reach the lexeme's end are pruned, so every live DFA state can
// still complete some lexeme: a prefix the lexer accepts is never a dead end.
//
// Not thread-safe: one engine thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <array>
#include <climits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/regex.h"

namespace tessera::grammar {

class Lexer {
 public:
  static constexpr int32_t kDead = -1;

  // The id of `re`'s lexeme (the same id for equal regexes). Throws
  // Error(kInvalidArgument) if it has no non-empty string, or if the
  // automaton would grow past its bound (a pattern such as (a{1000}){1000}).
  int32_t intern(const RegexPtr& re);
  int32_t num_lexemes() const { return static_cast<int32_t>(lexeme_start_.size()); }

  // The DFA state before the first byte of any lexeme in `lexemes` (sorted,
  // unique ids).
  int32_t start(std::span<const int32_t> lexemes);
  // The state after one more byte, or kDead.
  int32_t next(int32_t state, uint8_t byte) {
    const int32_t t = next_[static_cast<size_t>(state) * 256 + byte];
    return t != kUnknown ? t : compute_next(state, byte);  // which stores it
  }
  // The transition table, 256 entries a state, kUnknown where not computed
  // yet (next() computes it). Moves when states are added: walks that read
  // it directly take it again after each next().
  static constexpr int32_t kUnknown = -2;
  const int32_t* table() const { return next_.data();
  }
  // The lexemes whose text ends exactly here (sorted).
  std::span<const int32_t> accepted(int32_t state) const { return states_[static_cast<size_t>(state)].accepted; }

  // Mask classes: states whose futures agree for the next `horizon` bytes
  // share one. A long counted repetition (a JSON string's maxLength: one
  // DFA state per character) gives a state per count, but while both ends
  // of the count are more than `horizon` characters away, no token can tell
  // them apart: the copies of the repeated part are matched by their offset,
  // and their distance to the count's ends is clamped at the horizon. Set
  // the horizon before the first lexeme.
  void set_horizon(int32_t bytes) { horizon_ = bytes; }

  // Plain text: `kid` is one character of a string (JSON's plain character
  // or escape), and `chars` the characters it takes as themselves. Where a
  // state lies between two characters of a repetition of such a kid, and
  // nothing else there takes a character of `chars`, every token made only
  // of `chars` is allowed exactly when it has no more characters than are
  // left: plain_budget(state) says how many (kUnbounded, or -1 where this
  // does not hold). The token masks use it to skip those tokens' walk.
  // Call before the first lexeme.
  static constexpr int32_t kUnbounded = INT32_MAX;
  void add_plain_kid(const RegexPtr& kid, const CodepointSet& chars);
  int32_t plain_budget(int32_t state) const { return states_[static_cast<size_t>(state)].plain_budget; }
  // Whether `b` starts a character of add_plain_kid's `chars`.
  bool plain_lead(uint8_t b) const { return plain_lead_[b] != 0; }
  int32_t mask_class(int32_t state) const { return states_[static_cast<size_t>(state)].mask_class; }

  size_t num_states() const { return states_.size(); }
  size_t memory_bytes() const;

 private:
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  struct NfaState {
    std::vector<Edge> edges;
    std::vector<int32_t> eps;
    int32_t accept = -1;  // lexeme id
  };
  struct DfaState {
    std::vector<int32_t> nfa;  // sorted, closed under eps
    std::vector<int32_t> accepted;
    int32_t mask_class = 0;    // the first state of its class
    int32_t plain_budget = -1;
  };
  // NFA states inside a copy of a long repetition.
  struct CopyTag {
    int32_t repeat = -1;  // index into repeats_, -1: none
    int32_t copy = 0;
    int32_t offset = 0;   // from the copy's first state
  };
  struct Repeat {
    int32_t min, max;  // copies; max -1: unbounded
    bool plain;        // of a plain-text character
    std::vector<int32_t> entry;  // offsets where a character starts (plain)
  };
  static constexpr int32_t kStarCopy = INT32_MAX / 2;  // the copy a star loops over
  std::vector<int32_t> entry_offsets(int32_t at, int32_t first) const;
  int32_t plain_budget_of(const std::vector<int32_t>& set) const;

  int32_t new_nfa_state();
  int32_t emit(const Regex& r, int32_t from);
  void prune(int32_t first, int32_t final);
  void close(std::vector<int32_t>& set);
  int32_t intern_state(std::vector<int32_t> set);
  int32_t compute_next(int32_t state, uint8_t byte);

  std::vector<NfaState> nfa_;
  size_t lexeme_first_ = 0;  // the first NFA state of the lexeme being added
  std::vector<int32_t> lexeme_start_;
  std::unordered_map<std::string, int32_t> lexeme_ids_;
  std::vector<DfaState> states_;
  std::vector<int32_t> next_;  // 256 per state
  std::unordered_map<std::string, int32_t> state_ids_;
  std::unordered_map<std::string, int32_t> start_ids_;
  std::vector<CopyTag> tags_;  // per NFA state
  std::vector<Repeat> repeats_;
  std::unordered_map<std::string, int32_t> class_ids_;
  std::unordered_set<std::string> plain_kids_;
  std::array<uint8_t, 256> plain_lead_{};
  int32_t horizon_ = 1 << 20;
  std::vector<uint32_t> mark_;  // closure scratch, generation-stamped
  uint32_t generation_ = 0;
};

}  // namespace tessera::grammar
