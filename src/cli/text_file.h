// Reading a whole text file (perplexity's evaluation text, quantize's
// calibration text).
#pragma once

#include <cstdio>
#include <string>

#include "core/error.h"

namespace tessera::cli {

inline std::string read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TESSERA_CHECK(f != nullptr, kIo, "cannot open '{}'", path);
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace tessera::cli
