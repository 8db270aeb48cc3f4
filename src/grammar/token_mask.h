// The vocabulary side of structured output, one per tokenizer: the token
// trie, the shared lexer, and per lexer state the tokens it allows by itself.
//
// For a DFA state s the trie is walked once: a token whose bytes all stay
// inside the current lexeme is allowed or not by s alone, whatever the
// parser holds, so those tokens are cached as a bitset. Where a byte cannot
// extend the lexeme but the text so far ends one (a lexeme boundary), what
// follows depends on the parser: those trie nodes are kept as boundaries,
// grouped by the state they leave, and the Matcher walks only them (llguidance
// shares the same observation: most of a mask is decided by the lexer).
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
};

class TokenMasker {
 public:
  // pieces[id]: token id's bytes ("" for control tokens: never allowed);
  // eog: the end-of-generation ids, allowed exactly when the grammar accepts.
  TokenMasker(const std::vector<std::string>& pieces, std::vector<int32_t> eog,
              size_t cache_bytes = size_t{256} << 20);

  Lexer& lexer() { return lexer_; }
  const TokenTrie& trie() const { return trie_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eog() const { return eog_; }
  int32_t n_vocab() const { return trie_.n_vocab(); }
  // Words of a mask: one bit per token and the trie's scratch bit.
  size_t n_words() const { return static_cast<size_t>(trie_.n_vocab()) / 64 + 1; }

  const StateMask& state_mask(int32_t state);
  size_t cached_states() const { return cached_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  TokenTrie trie_;
  Lexer lexer_;
  std::vector<std::unique_ptr<StateMask>> cache_;  // per lexer state
  size_t cache_bytes_limit_;
  size_t cache_bytes_ = 0;
  size_t cached_ = 0;
  std::vector<int32_t> stack_;  // walk scratch: lexer state per depth
};

// The masker of a tokenizer's vocabulary: each token's bytes, control and
// unused entries left out, its end-of-generation tokens.
std::unique_ptr<TokenMasker> make_token_masker(const Tokenizer& tok);

// After a walk: twins follow their node's token, the scratch bit is cleared.
void finish_mask(const TokenTrie& trie, std::span<uint64_t> bits);

inline void set_bit(std::span<uint64_t> bits, int32_t i) {
  bits[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63);
}
inline bool test_bit(std::span<const uint64_t> bits, int32_t i) {
  return (bits[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1;
}

}  // namespace tessera::grammar
