#include "format/json_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), kIo, "cannot open {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  TESSERA_CHECK(!in.bad(), kIo, "cannot read {}", path);
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kCorruptFile, "{}: not valid JSON: {}", path, e.what());
  }
}

}  // namespace tessera
