// The vocabulary side of structured output, one per tokenizer: the token
// tries, the shared lexer, and per lexer state the tokens it allows by
// itself.
//
// For a DFA state s a trie is walked once: a token whose bytes all stay
// inside the current lexeme is allowed or not by s alone, whatever the
// parser holds, so those tokens are cached as a bitset. Where a byte cannot
// extend the lexeme but the text so far ends one (a lexeme boundary), what
// follows depends on the parser: those trie nodes are kept as boundaries,
// grouped by the state they leave, and the Matcher walks only them (llguidance
// builds on the same observation: most of a mask is the lexer's).
//
// The vocabulary is split in two tries: tokens of at most kShortToken bytes
// (98% of a 151k vocabulary) and the rest. The short trie's walk is cached
// per mask class (Lexer::mask_class with a horizon of kShortToken + 1: the
// positions of a long counted string share it), the long trie's per state.
// Between two characters of a JSON string's content, the short tokens of
// plain text are allowed by their length alone (Lexer::plain_budget): the
// walk covers only the others (llguidance calls such precomputed sets of
// tokens slices).
//
// Caches are bounded: past `cache_bytes` they are dropped and rebuilt on use.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/lexer.h"
#include "grammar/token_trie.h"

namespace tessera {
class Tokenizer;
}

namespace tessera::grammar {

struct StateMask {
  struct Boundary {
    uint32_t node;  // trie node whose byte starts the next lexeme
    int32_t from;   // lexer state it leaves (its lexemes ended there)
  };
  std::vector<uint64_t> bits;         // tokens allowed inside the lexeme
  std::vector<Boundary> boundaries;   // sorted by `from`
  int trie = 0;                       // the trie whose nodes `boundaries` names
};

class TokenMasker {
 public:
  static constexpr int kShortToken = 16;  // bytes
  // kShortNonPlain: the short tokens that are not JSON-plain text (a quote,
  // a backslash, a control character, or bytes that are not whole UTF-8
  // characters): all a plain-text state needs to walk (Lexer::plain_budget).
  enum Trie { kShort = 0, kLong = 1, kShortNonPlain = 2 };

  // pieces[id]: token id's bytes ("" for control tokens: never allowed);
  // eog: the end-of-generation ids, allowed exactly when the grammar accepts.
  TokenMasker(const std::vector<std::string>& pieces, std::vector<int32_t> eog,
              size_t cache_bytes = size_t{256} << 20);

  Lexer& lexer() { return lexer_; }
  const TokenTrie& trie(int t) const { return tries_[t]; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eog() const { return eog_; }
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  // Words of a mask: one bit per token and the tries' scratch bit.
  size_t n_words() const { return pieces_.size() / 64 + 1; }

  // What trie `t` allows from lexer state `state` by the lexer alone.
  const StateMask& state_mask(int t, int32_t state);
  size_t cached_states() const { return cached_; }
  // What the lexer and the caches hold: the lexer only grows, so its owner
  // drops the whole masker past a bound once no Matcher uses it.
  size_t memory_bytes() const { return lexer_.memory_bytes() + cache_bytes_; }
  int64_t live_matchers = 0;  // Matchers made over this masker, alive

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  TokenTrie tries_[3];
  // plain_upto_[c]: the short JSON-plain tokens of at most c characters.
  std::vector<std::vector<uint64_t>> plain_upto_;
  Lexer lexer_;
  std::vector<std::unique_ptr<StateMask>> cache_[2];  // short: per mask class; long: per state
  size_t cache_bytes_limit_;
  size_t cache_bytes_ = 0;
  size_t cached_ = 0;
  void walk_lexer(const TokenTrie& trie, int32_t state, StateMask& m);
  bool plain_ok(int32_t state, int32_t budget);
  std::vector<int32_t> stacks_[TokenTrie::kWays];  // walk scratch: lexer state per depth
};

// The masker of a tokenizer's vocabulary: each token's bytes, control and
// unused entries left out, its end-of-generation tokens.
std::unique_ptr<TokenMasker> make_token_masker(const Tokenizer& tok);

// After a walk of `trie`: twins follow their node's token, the scratch bit
// is cleared.
void finish_mask(const TokenTrie& trie, std::span<uint64_t> bits);

inline void set_bit(std::span<uint64_t> bits, int32_t i) {
  bits[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63);
}
inline bool test_bit(std::span<const uint64_t> bits, int32_t i) {
  return (bits[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1;
}

}  // namespace tessera::grammar
