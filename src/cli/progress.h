// A progress bar on stderr, redrawn in place; silent when stderr is not a
// terminal except for the final line.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace tessera::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}

  void update(int64_t done, int64_t total) {
    done_ = done;
    total_ = total;
    if (!tty_) return;
    const int width = 40;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : 0;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done > 0 ? secs * static_cast<double>(total - done) / static_cast<double>(done) : 0.0;
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.0fs left ", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), eta);
    std::fflush(stderr);
  }

  void finish() {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "%s%s: %lld/%lld done in %.1f s\n", tty_ ? "\r" : "", label_.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), secs);
  }

 private:
  std::string label_;
  bool tty_;
  int64_t done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tessera::cli
