#include "grammar/token_trie.h"

#include <algorithm>

namespace tessera::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& pieces) : n_vocab_(static_cast<int32_t>(pieces.size())) {
  constexpr size_t kMaxLen = 0xFFFF;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].empty() && pieces[i].size() < kMaxLen) ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)];
  });
  nodes_.push_back({});
  nodes_[0].token = n_vocab_;
  parents_.push_back(0);
  std::vector<uint32_t> path{0};  // node index per depth along the current piece
  const std::string* prev = nullptr;
  for (const int32_t id : ids) {
    const std::string& p = pieces[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < p.size() && common < prev->size() && p[common] == (*prev)[common]) ++common;
    }
    // Close the nodes of the previous piece below the shared prefix.
    while (path.size() > common + 1) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t i = common; i < p.size(); ++i) {
      parents_.push_back(path.back());
      Node n;
      n.byte = static_cast<uint8_t>(p[i]);
      n.depth = static_cast<uint16_t>(i + 1);
      n.token = n_vocab_;
      nodes_.push_back(n);
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
      max_depth_ = std::max(max_depth_, static_cast<int32_t>(i + 1));
    }
    Node& end = nodes_[path.back()];
    if (end.token == n_vocab_) {
      end.token = id;
    } else {
      twins_.emplace_back(end.token, id);
    }
    prev = &p;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  const auto n = static_cast<uint32_t>(nodes_.size());
  splits_.push_back(1);
  for (uint32_t c = 1; c < n; c = nodes_[c].end) {
    const uint32_t want = 1 + (n - 1) * static_cast<uint32_t>(splits_.size()) / kWays;
    if (static_cast<int>(splits_.size()) < kWays && c >= want && c > splits_.back()) splits_.push_back(c);
  }
  while (static_cast<int>(splits_.size()) <= kWays) splits_.push_back(n);
}

std::string TokenTrie::path_to(uint32_t node) const {
  std::string out;
  for (uint32_t n = node; n != 0; n = parents_[n]) out.push_back(static_cast<char>(nodes_[n].byte));
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace tessera::grammar
