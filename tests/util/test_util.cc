#include "util/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "engine/sequence_runner.h"

namespace tessera::testing {

const quant::Calibration& stories260k_calibration() {
  static const quant::Calibration cal = [] {
    const auto& m = stories260k();
    ThreadPool pool(2);
    const std::vector<int32_t> tokens = m.tok->encode(std::string(quant::default_calibration_text()), false);
    quant::CalibrationOptions o;
    o.bos = m.tok->bos_id();
    return quant::calibrate(*m.lm.model, tokens, o, pool);
  }();
  return cal;
}

void expect_logits_match_numpy(const LoadedModel& q, const std::string& path, const std::string& label,
                               ThreadPool& pool) {
  const auto& m = stories260k();
  const std::vector<int32_t> tokens = m.tok->encode("Once upon a time, there was a little girl named Lily. She loved to play", true);
  engine::SequenceRunner runner(*q.model, {.kv_type = DType::kF32}, pool);
  const std::span<const float> logits = runner.append(tokens, /*all_logits=*/true);
  const std::string lf = temp_path(label + ".logits");
  write_file(lf, std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
  std::string ids;
  for (int32_t t : tokens) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(t);
  }
  std::string cmd = "cd " TESSERA_SOURCE_DIR "/tests/reference && /usr/bin/python3 compare_logits.py ";  // (literal: see shared_dir)
  cmd += path;
  cmd += " --tokens " + ids;
  cmd += " --label " + label;
  cmd += " engine=" + lf;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

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
