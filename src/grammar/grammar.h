// Context-free grammars over lexemes: what JSON Schema, GBNF and regex
// constraints compile to, and what the Earley parser (grammar/earley.h) runs.
// A symbol >= 0 is a nonterminal; a symbol < 0 is lexeme ~symbol (a Regex
// that never matches ""; an optional lexeme is written L | ε).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/regex.h"

namespace tessera::grammar {

struct Grammar {
  struct Rule {
    int32_t lhs = 0;
    std::vector<int32_t> rhs;
  };
  std::vector<std::string> names;  // of the nonterminals
  std::vector<RegexPtr> lexemes;
  // Per lexeme: texts it must not be (leading JSON whitespace aside), such
  // as the listed names an object's extra key may not take. The lexer
  // cannot say it (the regex is shared by every object); the Matcher checks
  // the text where the lexeme ends.
  std::vector<std::vector<std::string>> excluded;
  std::vector<Rule> rules;
  int32_t start = 0;

  int32_t num_nonterminals() const { return static_cast<int32_t>(names.size()); }
  // Rules, one per line, for tests and error messages.
  std::string to_string() const;
};

inline int32_t lexeme_symbol(int32_t lexeme) { return ~lexeme; }
inline bool is_lexeme(int32_t symbol) { return symbol < 0; }

class GrammarBuilder {
 public:
  int32_t nonterminal(std::string name);
  void rule(int32_t lhs, std::vector<int32_t> rhs);

  // Symbols for any regex: one lexeme, or a fresh nonterminal for L | ε when
  // the regex also matches "" (no symbol at all for a regex of "" alone).
  // Equal regexes share their lexeme.
  std::vector<int32_t> text(const RegexPtr& re);
  std::vector<int32_t> literal(std::string_view s) { return text(re::literal(s)); }
  // A lexeme of its own (never shared) for `re` (no "" in it), whose text
  // is never one of `texts`.
  int32_t text_excluding(const RegexPtr& re, std::vector<std::string> texts);
  // A fresh nonterminal for a sequence, and for alternatives.
  int32_t seq(std::string name, std::vector<int32_t> symbols);
  int32_t alt(std::string name, const std::vector<std::vector<int32_t>>& options);

  // Drops rules that cannot derive any text, then checks what is left.
  // Throws Error(kInvalidArgument) when `start` derives nothing.
  Grammar finish(int32_t start);

 private:
  Grammar g_;
  std::unordered_map<std::string, int32_t> lexeme_ids_;
  std::unordered_map<std::string, int32_t> optional_ids_;
};

}  // namespace tessera::grammar
