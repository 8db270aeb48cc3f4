// Helpers shared by the unit tests: where the shared test data lives, temp
// files, and a skip for missing data.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "engine/sampling_params.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "quant/calibration.h"
#include "tokenizer/tokenizer.h"

namespace tessera::testing {

// ../shared beside the repository (read-only in CI).
std::string shared_dir();
std::string shared_path(const std::string& relative);
bool shared_exists(const std::string& relative);

// The stories260K model, the project's golden reference.
std::string stories260k_path();

// stories260K loaded once per test process, with its tokenizer.
struct LoadedWithTokenizer {
  LoadedModel lm;
  std::unique_ptr<Tokenizer> tok;
};
const LoadedWithTokenizer& stories260k();

// The input statistics of stories260K's linears over the built-in
// calibration text (quant/calibration.h), gathered once per process.
const quant::Calibration& stories260k_calibration();

// A stories260K-shaped model's logits of a real text against the numpy
// reference reading the same file (tests/reference/compare_logits.py).
void expect_logits_match_numpy(const LoadedModel& q, const std::string& path, const std::string& label,
                               ThreadPool& pool);

// Greedy decoding of n tokens that does not stop at EOS.
engine::SamplingParams greedy(int32_t n);

// A fresh directory under $TMPDIR, removed at process exit.
std::string temp_dir();
std::string temp_path(const std::string& name);

// load_model(path) must throw an Error whose one-line message contains `needle`.
void expect_load_error(const std::string& path, std::string_view needle);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

// This process's resident memory (VmRSS), KiB. Not a leak measure under
// AddressSanitizer, whose quarantine keeps freed memory resident.
long rss_kib();
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace tessera::testing

// Shared data is part of the contract (CI always has it); a test that needs a
// file which is missing fails rather than skips, so nothing passes vacuously.
#define TESSERA_REQUIRE_SHARED(rel) \
  ASSERT_TRUE(::tessera::testing::shared_exists(rel)) << "missing shared test data: " << (rel)
