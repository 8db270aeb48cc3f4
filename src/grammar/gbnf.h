// GBNF, llama.cpp's grammar format (grammars/README.md there), compiled to a
// Grammar: `name ::= alternatives`, "literals" with escapes, [classes] with
// ranges and ^, '.', groups, * + ? {m} {m,} {m,n}, # comments; `root` is
// the start. So that llama-server clients' `grammar` field works unchanged.
//
// The lexemes are single characters (a literal is a sequence of them): GBNF
// is a character-level grammar, and greedy lexing over longer pieces could
// refuse texts the grammar accepts. Exact, at the price of one parser step
// per character (docs/STRUCTURED_OUTPUT.md has the speed).
#pragma once

#include <memory>
#include <string_view>

#include "grammar/constraint.h"

namespace tessera::grammar {

// Throws Error(kInvalidArgument) naming the line and what is wrong
// (undefined rule, unterminated literal, missing root, ...).
std::shared_ptr<const Constraint> compile_gbnf(std::string_view text);

}  // namespace tessera::grammar
