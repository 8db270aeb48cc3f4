#include "quant/prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>

#include "core/error.h"

namespace tessera::quant {

PruneMethod parse_prune_method(const std::string& s) {
  if (s == "magnitude") return PruneMethod::kMagnitude;
  if (s == "wanda") return PruneMethod::kWanda;
  fail(ErrorCode::kInvalidArgument, "unknown pruning method '{}' (magnitude, wanda)", s);
}

const char* prune_method_name(PruneMethod m) { return m == PruneMethod::kWanda ? "wanda" : "magnitude"; }

void parse_nm(const std::string& s, PruneOptions* opt) {
  const size_t colon = s.find(':');
  int n = 0, m = 0;
  try {
    TESSERA_CHECK(colon != std::string::npos, kInvalidArgument, "--nm {}: expected N:M", s);
    n = std::stoi(s.substr(0, colon));
    m = std::stoi(s.substr(colon + 1));
  } catch (const std::logic_error&) {
    fail(ErrorCode::kInvalidArgument, "--nm {}: expected N:M (two integers)", s);
  }
  TESSERA_CHECK(0 < n && n < m && m <= 64 && 64 % m == 0, kInvalidArgument,
                "--nm {}: N:M needs 0 < N < M with M dividing 64 (2:4, 4:8, 1:4 ...)", s);
  opt->n = n;
  opt->m = m;
}

bool prunable(const std::string& name) {
  // blk.<N>.<linear>.weight
  constexpr std::string_view kPrefix = "blk.", kSuffix = ".weight";
  if (name.size() < kPrefix.size() + kSuffix.size() + 2 || name.compare(0, kPrefix.size(), kPrefix) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return false;
  }
  size_t i = kPrefix.size();
  const size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits || i >= name.size() || name[i] != '.') return false;
  const std::string_view linear = std::string_view(name).substr(i + 1, name.size() - kSuffix.size() - i - 1);
  for (std::string_view l : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
    if (linear == l) return true;
  }
  return false;
}

std::vector<float> input_norms(const InputStats& s) {
  std::vector<float> n(static_cast<size_t>(s.dim));
  for (int64_t j = 0; j < s.dim; ++j) n[static_cast<size_t>(j)] = static_cast<float>(std::sqrt(std::max(0.0, s.h[static_cast<size_t>(j * s.dim + j)])));
  return n;
}

int64_t prune_matrix(float* w, int64_t rows, int64_t cols, std::span<const float> norms, const PruneOptions& opt) {
  const bool wanda = opt.method == PruneMethod::kWanda;
  TESSERA_CHECK(!wanda || static_cast<int64_t>(norms.size()) == cols, kInvalidArgument,
                "wanda: {} input norms for a matrix of {} columns", norms.size(), cols);
  TESSERA_CHECK(opt.structured() ? cols % opt.m == 0 : opt.sparsity >= 0.0 && opt.sparsity < 1.0, kInvalidArgument,
                "prune: {} columns with N:M {}:{} or sparsity {}", cols, opt.n, opt.m, opt.sparsity);
  std::vector<float> score(static_cast<size_t>(cols));
  std::vector<int64_t> idx(static_cast<size_t>(cols));
  // Lowest score first; ties: the lower column first.
  const auto lower = [&](int64_t a, int64_t b) {
    return score[static_cast<size_t>(a)] < score[static_cast<size_t>(b)] ||
           (score[static_cast<size_t>(a)] == score[static_cast<size_t>(b)] && a < b);
  };
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      score[static_cast<size_t>(j)] = std::fabs(row[j]) * (wanda ? norms[static_cast<size_t>(j)] : 1.0f);
    }
    if (opt.structured()) {
      for (int64_t g = 0; g < cols; g += opt.m) {
        std::iota(idx.begin(), idx.begin() + opt.m, g);
        std::sort(idx.begin(), idx.begin() + opt.m, lower);
        for (int k = 0; k < opt.m - opt.n; ++k) row[idx[static_cast<size_t>(k)]] = 0.0f;
      }
    } else {
      const int64_t drop = std::llround(opt.sparsity * static_cast<double>(cols));
      std::iota(idx.begin(), idx.end(), int64_t{0});
      if (drop > 0) {
        std::nth_element(idx.begin(), idx.begin() + (drop - 1), idx.end(), lower);
        for (int64_t k = 0; k < drop; ++k) row[idx[static_cast<size_t>(k)]] = 0.0f;
      }
    }
    for (int64_t j = 0; j < cols; ++j) kept += row[j] != 0.0f;
  }
  return kept;
}

}  // namespace tessera::quant
