#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tessera {

void assertion_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "tessera: internal assertion failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
}

}  // namespace tessera
