#include "grammar/constraint.h"

namespace tessera::grammar {

std::shared_ptr<const Constraint> make_constraint(std::string kind, Grammar g) {
  auto c = std::make_shared<Constraint>();
  c->kind = std::move(kind);
  c->grammar = std::move(g);
  c->tables = std::make_shared<EarleyTables>(c->grammar);
  return c;
}

std::shared_ptr<const Constraint> compile_regex(std::string_view pattern) {
  GrammarBuilder b;
  const int32_t root = b.seq("root", b.text(parse_regex(pattern)));
  return make_constraint("regex", b.finish(root));
}

}  // namespace tessera::grammar
