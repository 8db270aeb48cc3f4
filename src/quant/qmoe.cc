#include "quant/qmoe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "core/fp16.h"

namespace tessera::quant {
namespace {

float fp16_round(float v) { return fp16_to_f32(f32_to_fp16(v)); }

// The nearest of {lo, 0, hi} to v (ties to zero).
uint8_t nearest(double v, float lo, float hi) {
  const double d0 = std::abs(v), dl = std::abs(v - lo), dh = std::abs(v - hi);
  if (d0 <= dl && d0 <= dh) return kTernaryZero;
  return dl <= dh ? kTernaryLo : kTernaryHi;
}

void row_range(const float* w, int64_t cols, float* lo, float* hi) {
  const auto [mn, mx] = std::minmax_element(w, w + cols);
  *lo = fp16_round(std::min(*mn, 0.0f));
  *hi = fp16_round(std::max(*mx, 0.0f));
}

// The Tunstall tree: node i's children (3 of them) or -1 for a leaf; a
// leaf's string; leaves numbered in creation order.
struct Tree {
  std::vector<std::array<int32_t, 3>> child;
  std::vector<std::vector<uint8_t>> str;
  std::vector<int32_t> leaf_code;  // per node: its codeword, or -1 (inner)
};

Tree tunstall_tree(const std::array<double, 3>& p) {
  Tree t;
  struct Leaf {
    double prob;
    int32_t node;
    bool operator<(const Leaf& o) const { return prob < o.prob || (prob == o.prob && node > o.node); }
  };
  std::priority_queue<Leaf> open;
  auto add = [&](std::vector<uint8_t> s, double prob) {
    t.child.push_back({-1, -1, -1});
    t.str.push_back(std::move(s));
    t.leaf_code.push_back(-1);
    const int32_t id = static_cast<int32_t>(t.child.size()) - 1;
    if (static_cast<int>(t.str[id].size()) < kernels::kQmoeMaxLength) open.push({prob, id});
    return id;
  };
  t.child.push_back({-1, -1, -1});  // the root
  t.str.push_back({});
  t.leaf_code.push_back(-1);
  int leaves = 0;
  auto expand = [&](int32_t node, double prob) {
    for (uint8_t s = 0; s < 3; ++s) {
      std::vector<uint8_t> str = t.str[node];
      str.push_back(s);
      const int32_t c = add(std::move(str), prob * std::max(p[s], 1e-12));
      t.child[node][s] = c;
    }
    leaves += node == 0 ? 3 : 2;
  };
  expand(0, 1.0);
  while (leaves + 2 <= 255 && !open.empty()) {
    const Leaf l = open.top();
    open.pop();
    expand(l.node, l.prob);
  }
  int32_t code = 0;
  for (size_t i = 1; i < t.child.size(); ++i) {
    if (t.child[i][0] < 0) t.leaf_code[i] = code++;
  }
  TESSERA_ASSERT(code == leaves && code <= 255);
  return t;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}

// The dictionary entries of a tree's leaves (masks of lo / hi symbols, length).
std::array<kernels::QmoeEntry, 256> dictionary_of(const Tree& t) {
  std::array<kernels::QmoeEntry, 256> d{};
  for (size_t i = 1; i < t.child.size(); ++i) {
    if (t.leaf_code[i] < 0) continue;
    kernels::QmoeEntry& e = d[static_cast<size_t>(t.leaf_code[i])];
    e.length = static_cast<uint8_t>(t.str[i].size());
    for (size_t j = 0; j < t.str[i].size(); ++j) {
      if (t.str[i][j] == kTernaryLo) e.lo_mask |= static_cast<uint16_t>(1u << j);
      if (t.str[i][j] == kTernaryHi) e.hi_mask |= static_cast<uint16_t>(1u << j);
    }
  }
  const int used = static_cast<int>(std::count_if(t.leaf_code.begin(), t.leaf_code.end(), [](int32_t c) { return c >= 0; }));
  for (int i = used; i < 256; ++i) d[static_cast<size_t>(i)] = d[0];  // unused: valid, never written
  return d;
}

}  // namespace

TernaryMatrix ternary_rtn(const float* w, int64_t rows, int64_t cols) {
  TernaryMatrix m{rows, cols, std::vector<float>(rows), std::vector<float>(rows),
                  std::vector<uint8_t>(static_cast<size_t>(rows * cols))};
  for (int64_t r = 0; r < rows; ++r) {
    row_range(w + r * cols, cols, &m.lo[r], &m.hi[r]);
    for (int64_t c = 0; c < cols; ++c) m.sym[static_cast<size_t>(r * cols + c)] = nearest(w[r * cols + c], m.lo[r], m.hi[r]);
  }
  return m;
}

TernaryMatrix ternary_gptq(const float* w, int64_t rows, int64_t cols, std::span<const double> h,
                           const GptqOptions& opt, ThreadPool* pool) {
  TernaryMatrix m{rows, cols, std::vector<float>(rows), std::vector<float>(rows),
                  std::vector<uint8_t>(static_cast<size_t>(rows * cols))};
  for (int64_t r = 0; r < rows; ++r) row_range(w + r * cols, cols, &m.lo[r], &m.hi[r]);
  const GptqHessian hs = gptq_hessian(h, cols, opt, pool);
  gptq_sweep(hs, w, rows, opt.batch, pool, {}, [&](int64_t r, int64_t i, const double* x) {
    const uint8_t s = nearest(x[i], m.lo[r], m.hi[r]);
    m.sym[static_cast<size_t>(r * cols + hs.perm[i])] = s;
    return s == kTernaryLo ? static_cast<double>(m.lo[r]) : s == kTernaryHi ? static_cast<double>(m.hi[r]) : 0.0;
  });
  return m;
}

std::array<kernels::QmoeEntry, 256> tunstall_dictionary(const std::array<double, 3>& p) {
  return dictionary_of(tunstall_tree(p));
}

std::vector<uint8_t> encode_qmoe(std::span<const TernaryMatrix> mats) {
  TESSERA_CHECK(!mats.empty(), kInvalidArgument, "encode_qmoe: no matrices");
  const int64_t rows = mats[0].rows, cols = mats[0].cols;
  std::array<double, 3> count{};
  for (const TernaryMatrix& m : mats) {
    TESSERA_CHECK(m.rows == rows && m.cols == cols, kInvalidArgument, "encode_qmoe: matrices of different shapes");
    for (uint8_t s : m.sym) count[s] += 1.0;
  }
  const double total = count[0] + count[1] + count[2];
  const Tree t = tunstall_tree({count[0] / total, count[1] / total, count[2] / total});
  const std::array<kernels::QmoeEntry, 256> dict = dictionary_of(t);  // the same tree parses the rows
  // Codes, row after row; a row's last string is completed with zeros.
  std::vector<uint8_t> codes;
  std::vector<uint32_t> group_start;
  std::vector<uint16_t> scales;
  int64_t global = 0;
  for (const TernaryMatrix& m : mats) {
    for (int64_t r = 0; r < rows; ++r, ++global) {
      if (global % kernels::kQmoeGroupRows == 0) group_start.push_back(static_cast<uint32_t>(codes.size()));
      scales.push_back(f32_to_fp16(m.lo[r]));
      scales.push_back(f32_to_fp16(m.hi[r]));
      const uint8_t* s = m.sym.data() + r * cols;
      for (int64_t c = 0; c < cols;) {
        int32_t node = 0;
        do {
          node = t.child[node][c < cols ? s[c] : kTernaryZero];
          ++c;
        } while (t.leaf_code[node] < 0);
        codes.push_back(static_cast<uint8_t>(t.leaf_code[node]));
      }
    }
  }
  TESSERA_CHECK(codes.size() < (uint64_t{1} << 32), kInvalidArgument, "encode_qmoe: {} codewords do not fit u32 offsets",
                codes.size());
  group_start.push_back(static_cast<uint32_t>(codes.size()));
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), "QMOE", 4);
  put_u32(out, kernels::kQmoeVersion);
  put_u64(out, 0);  // the size, below
  put_u32(out, static_cast<uint32_t>(kernels::kQmoeGroupRows));
  put_u32(out, 0);
  put_u64(out, codes.size());
  const size_t dict_at = out.size();
  out.resize(dict_at + sizeof(dict));
  std::memcpy(out.data() + dict_at, dict.data(), sizeof(dict));
  const size_t scales_at = out.size();
  out.resize(scales_at + scales.size() * 2);
  std::memcpy(out.data() + scales_at, scales.data(), scales.size() * 2);
  for (uint32_t g : group_start) put_u32(out, g);
  const size_t codes_at = out.size();
  out.resize((codes_at + codes.size() + 7) / 8 * 8, 0);
  std::memcpy(out.data() + codes_at, codes.data(), codes.size());
  const uint64_t n = out.size();
  std::memcpy(out.data() + 8, &n, 8);
  return out;
}

}  // namespace tessera::quant
