// One sequence's place in its grammar: an Earley parser over lexemes, the
// lexer state inside the current lexeme, and the tokens accepted so far.
// Copyable (n > 1 samples fork it), rolled back token by token (rejected
// speculative drafts).
//
// Lexing is greedy: a lexeme ends only where the next byte cannot extend
// it (JSON's numbers, strings and keywords all end that way), and at the end
// of the text. The grammars compiled here never need a lexeme to end where
// it could go on, which is what lets the lexer state alone decide most of a
// mask (grammar/token_mask.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/earley.h"
#include "grammar/token_mask.h"

namespace tessera::grammar {

class Matcher {
 public:
  // Interns the constraint's lexemes into the masker's lexer.
  Matcher(std::shared_ptr<const Constraint> constraint, TokenMasker& masker);
  Matcher(const Matcher& other);  // a fork (n > 1 samples): the same place, its own future
  Matcher& operator=(const Matcher&) = delete;
  ~Matcher();

  // The tokens that may come next, as bits[id / 64] >> (id % 64): every token
  // whose bytes extend the text toward a sentence of the grammar, and the
  // end-of-generation tokens when the text is one already. `bits` has
  // masker.n_words() words. Never empty (the grammar has no dead ends).
  void fill_mask(std::span<uint64_t> bits);

  // Appends a token; false (and nothing changes) when the mask would not
  // allow it. An end-of-generation token ends the text.
  bool accept(int32_t token);
  // Appends raw bytes (tests, forced text); false and unchanged if rejected.
  bool accept_bytes(std::string_view bytes);
  // Whether the text so far is a whole sentence (end-of-generation allowed).
  bool can_end();
  bool ended() const { return ended_; }

  size_t num_tokens() const { return history_.size(); }
  // Back to the state after the first `n` accepted tokens.
  void rollback(size_t n);

  const Constraint& constraint() const { return *constraint_; }

 private:
  struct Mark {
    size_t sets;
    int32_t state;
    bool ended;
    size_t text, lexeme_start;
  };
  // Pushes a parser set (and its start state) for the lexemes that end at
  // `state`, whose text `text()` gives (read only when a lexeme excludes
  // some texts).
  template <class Text>
  bool scan_ended(int32_t state, Text&& text);
  bool excludes(int32_t state) const;  // an ended lexeme there excludes texts
  void pop();
  int32_t step(int32_t state, uint8_t byte);
  int32_t start_of_expected();
  void walk(const TokenTrie& trie, uint32_t node, int32_t state, std::span<uint64_t> bits);
  void walk_boundaries(const TokenTrie& trie, const StateMask& sm, std::span<uint64_t> bits);

  std::shared_ptr<const Constraint> constraint_;
  TokenMasker* masker_;
  std::vector<int32_t> global_;  // grammar lexeme -> lexer lexeme
  std::vector<std::pair<int32_t, int32_t>> local_;  // (lexer lexeme, grammar lexeme), sorted
  EarleyParser parser_;
  std::vector<int32_t> starts_;  // per parser set: the lexer state before its next lexeme
  int32_t state_ = Lexer::kDead;  // inside the current lexeme
  bool ended_ = false;
  std::vector<Mark> history_;
  std::vector<int32_t> scratch_;
  bool has_exclusions_ = false;
  std::string text_;          // every byte accepted
  size_t lexeme_start_ = 0;   // where in text_ the current lexeme began
  std::string path_;          // a walk's bytes of the token so far
  int32_t walk_start_ = -1;   // where in path_ the walk's lexeme began (-1: before the token)
};

}  // namespace tessera::grammar
