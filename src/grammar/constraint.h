// A compiled output constraint: the grammar a JSON Schema, a GBNF grammar or
// a regex turned into, with its Earley tables. Immutable and independent of
// any vocabulary, so it is built (and its errors reported) where the request
// is parsed, and shared by every sequence that uses it.
#pragma once

#include <memory>
#include <string>

#include "grammar/earley.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

struct Constraint {
  std::string kind;  // "json_schema", "json_object", "gbnf", "regex"
  Grammar grammar;
  std::shared_ptr<const EarleyTables> tables;
};

std::shared_ptr<const Constraint> make_constraint(std::string kind, Grammar g);

// Whole text matching `pattern` (parse_regex's syntax). Throws
// Error(kInvalidArgument) naming what is wrong.
std::shared_ptr<const Constraint> compile_regex(std::string_view pattern);

}  // namespace tessera::grammar
