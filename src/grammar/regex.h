// Regular expressions over code points: the terminals (lexemes) of the
// grammars that JSON Schema, GBNF and the `regex` field compile to.
//
// A Regex is an immutable tree built by the functions below or parsed from
// pattern text (ECMAScript syntax as JSON Schema's `pattern` uses it). Only
// the language matters (no captures, no laziness), so backreferences and
// lookaround, which are not regular, are refused with an error naming them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/codepoints.h"

namespace tessera::grammar {

struct Regex;
using RegexPtr = std::shared_ptr<const Regex>;

struct Regex {
  enum class Kind { kEmpty, kSet, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;   // kEmpty matches only ""
  CodepointSet set;           // kSet: one code point of it (an empty set matches nothing)
  std::vector<RegexPtr> kids; // kSeq, kAlt; kRepeat: one
  int32_t min = 0, max = -1;  // kRepeat; max -1: unbounded
};

namespace re {
RegexPtr empty();
RegexPtr set(CodepointSet s);
RegexPtr literal(std::string_view utf8);  // the exact text
RegexPtr seq(std::vector<RegexPtr> parts);
RegexPtr alt(std::vector<RegexPtr> options);
RegexPtr repeat(RegexPtr r, int32_t min, int32_t max);
inline RegexPtr opt(RegexPtr r) { return repeat(std::move(r), 0, 1); }
inline RegexPtr star(RegexPtr r) { return repeat(std::move(r), 0, -1); }
inline RegexPtr plus(RegexPtr r) { return repeat(std::move(r), 1, -1); }
}  // namespace re

// Whether "" is in the language.
bool nullable(const Regex& r);
// Whether the language is empty.
bool matches_nothing(const Regex& r);
// Whether some non-empty string is in the language.
bool has_nonempty(const Regex& r);
// The same tree with every unbounded repetition bounded by `max` (a subset
// of the language).
RegexPtr cap_repeats(const RegexPtr& r, int32_t max);
// Canonical text of the tree: equal trees, equal keys (lexeme interning).
std::string regex_key(const Regex& r);

struct RegexOptions {
  // Every atom ('.', classes, literals) is intersected with this set: JSON
  // string contents exclude '"', '\\' and controls, so a pattern compiled
  // for them matches only strings that need no escapes.
  CodepointSet alphabet = CodepointSet::all();
  // JSON Schema's patterns search (unanchored unless ^/$); GBNF and the
  // `regex` field match the whole text.
  bool search = false;
  // With search: the text around the match holds at most this many
  // characters on each side (-1: any).
  int32_t search_pad_max = -1;
};

// Parses an ECMAScript-style pattern: literals, '.', classes with ranges and
// negation, \d \w \s \D \W \S \t \n \r \f \v \0 \xHH \uHHHH \u{H..}, groups
// (capturing, (?:...)), '|', quantifiers * + ? {n} {n,} {n,m} (lazy forms
// accepted), and ^ / $ at the ends. Throws Error(kInvalidArgument) naming the
// construct it does not support and where.
RegexPtr parse_regex(std::string_view pattern, const RegexOptions& opts = {});

}  // namespace tessera::grammar
