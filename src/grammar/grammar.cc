#include "grammar/grammar.h"

#include "core/error.h"

namespace tessera::grammar {

int32_t GrammarBuilder::nonterminal(std::string name) {
  g_.names.push_back(std::move(name));
  return g_.num_nonterminals() - 1;
}

void GrammarBuilder::rule(int32_t lhs, std::vector<int32_t> rhs) { g_.rules.push_back({lhs, std::move(rhs)}); }

std::vector<int32_t> GrammarBuilder::text(const RegexPtr& re) {
  if (!has_nonempty(*re)) {
    TESSERA_CHECK(nullable(*re), kInvalidArgument, "structured output: a pattern matches no text at all");
    return {};
  }
  const std::string key = regex_key(*re);
  int32_t id;
  if (auto it = lexeme_ids_.find(key); it != lexeme_ids_.end()) {
    id = it->second;
  } else {
    id = static_cast<int32_t>(g_.lexemes.size());
    g_.lexemes.push_back(re);
    g_.excluded.emplace_back();
    lexeme_ids_.emplace(key, id);
  }
  if (!nullable(*re)) return {lexeme_symbol(id)};
  if (auto it = optional_ids_.find(key); it != optional_ids_.end()) return {it->second};
  const int32_t n = nonterminal("opt_lexeme");
  rule(n, {lexeme_symbol(id)});
  rule(n, {});
  optional_ids_.emplace(key, n);
  return {n};
}

int32_t GrammarBuilder::text_excluding(const RegexPtr& re, std::vector<std::string> texts) {
  TESSERA_CHECK(has_nonempty(*re) && !nullable(*re), kInvalidArgument,
                "structured output: an excluding lexeme must match non-empty text only");
  const auto id = static_cast<int32_t>(g_.lexemes.size());
  g_.lexemes.push_back(re);
  g_.excluded.push_back(std::move(texts));
  return lexeme_symbol(id);
}

int32_t GrammarBuilder::seq(std::string name, std::vector<int32_t> symbols) {
  const int32_t n = nonterminal(std::move(name));
  rule(n, std::move(symbols));
  return n;
}

int32_t GrammarBuilder::alt(std::string name, const std::vector<std::vector<int32_t>>& options) {
  const int32_t n = nonterminal(std::move(name));
  for (const auto& o : options) rule(n, o);
  return n;
}

Grammar GrammarBuilder::finish(int32_t start) {
  Grammar g = std::move(g_);
  g_ = {};
  lexeme_ids_.clear();
  optional_ids_.clear();
  g.start = start;
  // Productive nonterminals: a fixpoint over the rules.
  std::vector<uint8_t> productive(static_cast<size_t>(g.num_nonterminals()), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& r : g.rules) {
      if (productive[static_cast<size_t>(r.lhs)]) continue;
      bool ok = true;
      for (const int32_t s : r.rhs) ok = ok && (is_lexeme(s) || productive[static_cast<size_t>(s)]);
      if (ok) {
        productive[static_cast<size_t>(r.lhs)] = 1;
        changed = true;
      }
    }
  }
  TESSERA_CHECK(productive[static_cast<size_t>(start)], kInvalidArgument,
                "structured output: the grammar admits no text (every alternative is unsatisfiable)");
  std::erase_if(g.rules, [&](const Grammar::Rule& r) {
    if (!productive[static_cast<size_t>(r.lhs)]) return true;
    for (const int32_t s : r.rhs) if (!is_lexeme(s) && !productive[static_cast<size_t>(s)]) return true;
    return false;
  });
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  for (const auto& r : rules) {
    out += names[static_cast<size_t>(r.lhs)] + "#" + std::to_string(r.lhs) + " ::=";
    for (const int32_t s : r.rhs) {
      out += ' ';
      if (is_lexeme(s)) {
        out += '/';
        out += regex_key(*lexemes[static_cast<size_t>(~s)]);
        out += '/';
      } else {
        out += names[static_cast<size_t>(s)];
        out += '#';
        out += std::to_string(s);
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace tessera::grammar
