#include "util/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::testing {

engine::SamplingParams greedy(int32_t n) {
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

void expect_load_error(const std::string& path, std::string_view needle) {
  try {
    load_model(path);
    ADD_FAILURE() << path << " loaded; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos)
        << "message '" << e.what() << "' does not contain '" << needle << "'";
    EXPECT_EQ(std::string_view(e.what()).find('\n'), std::string_view::npos) << "not one line: " << e.what();
  }
}

std::string shared_dir() {
  if (const char* env = std::getenv("TESSERA_SHARED")) return env;
  // (A literal concatenation, not std::string + "..": GCC 12 at -O1 warns
  // falsely about the temporary's bounds, -Warray-bounds.)
  return TESSERA_SOURCE_DIR "/../shared";
}

std::string shared_path(const std::string& relative) { return shared_dir() + "/" + relative; }

bool shared_exists(const std::string& relative) {
  return std::filesystem::exists(shared_path(relative));
}

std::string stories260k_path() { return shared_path("models/stories260K/stories260K.gguf"); }

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tessera-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string temp_dir() {
  static TempDir dir;
  return dir.path;
}

std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  }
  return -1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

const LoadedWithTokenizer& stories260k() {
  static const LoadedWithTokenizer* l = [] {
    auto* p = new LoadedWithTokenizer{load_model(stories260k_path()), nullptr};
    p->tok = Tokenizer::from_gguf(*p->lm.file);
    return p;
  }();
  return *l;
}

}  // namespace tessera::testing
