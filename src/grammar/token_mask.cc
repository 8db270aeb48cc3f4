#include "grammar/token_mask.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace tessera::grammar {

TokenMasker::TokenMasker(const std::vector<std::string>& pieces, std::vector<int32_t> eog, size_t cache_bytes)
    : pieces_(pieces), eog_(std::move(eog)), trie_(pieces), cache_bytes_limit_(cache_bytes) {
  stack_.resize(static_cast<size_t>(trie_.max_depth()) + 1);
}

const StateMask& TokenMasker::state_mask(int32_t state) {
  if (cache_.size() <= static_cast<size_t>(state)) cache_.resize(static_cast<size_t>(state) + 1);
  if (cache_[static_cast<size_t>(state)]) return *cache_[static_cast<size_t>(state)];
  if (cache_bytes_ > cache_bytes_limit_) {
    for (auto& c : cache_) c.reset();
    cache_bytes_ = 0;
    cached_ = 0;
  }
  auto m = std::make_unique<StateMask>();
  m->bits.assign(n_words(), 0);
  const auto& nodes = trie_.nodes();
  stack_[0] = state;
  uint64_t* bits = m->bits.data();
  for (uint32_t i = 1; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    const int32_t from = stack_[n.depth - 1];
    const int32_t t = lexer_.next(from, n.byte);
    if (t == Lexer::kDead) [[unlikely]] {
      if (!lexer_.accepted(from).empty()) m->boundaries.push_back({i, from});
      i = n.end;
      continue;
    }
    stack_[n.depth] = t;
    bits[static_cast<uint32_t>(n.token) >> 6] |= uint64_t{1} << (n.token & 63);
    ++i;
  }
  finish_mask(trie_, m->bits);
  std::stable_sort(m->boundaries.begin(), m->boundaries.end(),
                   [](const StateMask::Boundary& a, const StateMask::Boundary& b) { return a.from < b.from; });
  cache_bytes_ += m->bits.size() * 8 + m->boundaries.size() * sizeof(StateMask::Boundary) + sizeof(StateMask);
  ++cached_;
  // The walk may have added lexer states: the cache grows with them.
  if (cache_.size() <= static_cast<size_t>(state)) cache_.resize(static_cast<size_t>(state) + 1);
  cache_[static_cast<size_t>(state)] = std::move(m);
  return *cache_[static_cast<size_t>(state)];
}

void finish_mask(const TokenTrie& trie, std::span<uint64_t> bits) {
  for (const auto& [first, twin] : trie.twins()) {
    if (test_bit(bits, first)) set_bit(bits, twin);
  }
  const int32_t scratch = trie.n_vocab();
  bits[static_cast<size_t>(scratch) >> 6] &= ~(uint64_t{1} << (scratch & 63));
}

std::unique_ptr<TokenMasker> make_token_masker(const Tokenizer& tok) {
  std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_eog(id)) {
      eog.push_back(id);  // allowed by the grammar's end, never by its bytes
      continue;
    }
    if (tok.is_control(id) || tok.is_unused(id)) continue;
    pieces[static_cast<size_t>(id)] = tok.token_to_piece(id);
  }
  return std::make_unique<TokenMasker>(pieces, std::move(eog));
}

}  // namespace tessera::grammar
