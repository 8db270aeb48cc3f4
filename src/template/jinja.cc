#include "template/jinja.h"

#include "core/error.h"
#include "template/jinja_parser.h"

namespace tessera::server::jinja {

Template Template::parse(std::string_view source) {
  Template t;
  t.body_ = std::make_shared<const Body>(parse_template(source));
  return t;
}

std::string Template::render(std::vector<std::pair<std::string, Value>> vars, const RenderLimits& limits) const {
  TESSERA_CHECK(body_, kInvalidArgument, "no template was parsed");
  Renderer renderer(limits);
  return renderer.render(*body_, std::move(vars));
}

}  // namespace tessera::server::jinja
