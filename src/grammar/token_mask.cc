#include "grammar/token_mask.h"

#include <algorithm>

#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tessera::grammar {

namespace {

// Characters of `piece` when it is whole UTF-8 made only of JSON-plain
// characters, else -1.
int plain_chars_in(const std::string& piece) {
  if (!tok::is_valid_utf8(piece)) return -1;
  int n = 0;
  for (size_t i = 0; i < piece.size();) {
    const uint32_t c = tok::next_code_point(piece, i);
    if (c < 0x20 || c == '"' || c == '\\') return -1;
    ++n;
  }
  return n;
}

enum class Part { kShort, kLong, kShortNonPlain };

std::vector<std::string> pieces_where(const std::vector<std::string>& pieces, Part part) {
  std::vector<std::string> out(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool is_long = pieces[i].size() > TokenMasker::kShortToken;
    const bool keep = part == Part::kLong    ? is_long
                      : part == Part::kShort ? !is_long
                                             : !is_long && plain_chars_in(pieces[i]) < 0;
    if (keep) out[i] = pieces[i];
  }
  return out;
}

}  // namespace

TokenMasker::TokenMasker(const std::vector<std::string>& pieces, std::vector<int32_t> eog, size_t cache_bytes)
    : pieces_(pieces),
      eog_(std::move(eog)),
      tries_{TokenTrie(pieces_where(pieces, Part::kShort)), TokenTrie(pieces_where(pieces, Part::kLong)),
             TokenTrie(pieces_where(pieces, Part::kShortNonPlain))},
      cache_bytes_limit_(cache_bytes) {
  lexer_.set_horizon(kShortToken + 1);
  lexer_.add_plain_kid(json_string_char(), json_plain_chars());
  lexer_.add_plain_kid(re::set(json_plain_chars()), json_plain_chars());
  plain_upto_.assign(kShortToken + 1, std::vector<uint64_t>(n_words(), 0));
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (pieces_[id].empty() || pieces_[id].size() > kShortToken) continue;
    const int n = plain_chars_in(pieces_[id]);
    for (int c = std::max(n, 0); n >= 0 && c <= kShortToken; ++c) set_bit(plain_upto_[static_cast<size_t>(c)], static_cast<int32_t>(id));
  }
  for (auto& st : stacks_) st.resize(static_cast<size_t>(std::max(tries_[0].max_depth(), tries_[1].max_depth())) + 1);
}

const StateMask& TokenMasker::state_mask(int t, int32_t state) {
  const int32_t key = t == kShort ? lexer_.mask_class(state) : state;
  auto& cache = cache_[t];
  if (cache.size() <= static_cast<size_t>(key)) cache.resize(static_cast<size_t>(key) + 1);
  if (cache[static_cast<size_t>(key)]) return *cache[static_cast<size_t>(key)];
  if (cache_bytes_ > cache_bytes_limit_) {
    for (auto& c : cache_) {
      for (auto& m : c) m.reset();
    }
    cache_bytes_ = 0;
    cached_ = 0;
  }
  auto m = std::make_unique<StateMask>();
  m->bits.assign(n_words(), 0);
  const int32_t budget = t == kShort ? lexer_.plain_budget(state) : -1;
  if (budget >= 0 && plain_ok(state, budget)) {
    // Plain text by its length; the rest by a walk of their own trie.
    m->bits = plain_upto_[static_cast<size_t>(std::min(budget, kShortToken))];
    m->trie = kShortNonPlain;
  } else {
    m->trie = t;
  }
  walk_lexer(tries_[m->trie], state, *m);
  finish_mask(tries_[t], m->bits);
  std::stable_sort(m->boundaries.begin(), m->boundaries.end(),
                   [](const StateMask::Boundary& a, const StateMask::Boundary& b) { return a.from < b.from; });
  cache_bytes_ += m->bits.size() * 8 + m->boundaries.size() * sizeof(StateMask::Boundary) + sizeof(StateMask);
  ++cached_;
  cache[static_cast<size_t>(key)] = std::move(m);
  return *cache[static_cast<size_t>(key)];
}

// With fewer plain characters left than a short token holds, the plain
// tokens that are longer must die without a boundary: the state `budget`
// plain characters on neither ends a lexeme nor takes a plain byte.
bool TokenMasker::plain_ok(int32_t state, int32_t budget) {
  if (budget >= kShortToken) return true;
  int32_t s = state;
  for (int32_t i = 0; i < budget && s != Lexer::kDead; ++i) s = lexer_.next(s, 'a');
  if (s == Lexer::kDead || !lexer_.accepted(s).empty()) return false;
  for (int b = 0; b < 256; ++b) {
    if (lexer_.plain_lead(static_cast<uint8_t>(b)) && lexer_.next(s, static_cast<uint8_t>(b)) != Lexer::kDead) return false;
  }
  return true;
}

// The lexer-only walk, TokenTrie::kWays runs side by side (each node's
// state depends on its parent's through a load: one run alone is latency
// bound).
void TokenMasker::walk_lexer(const TokenTrie& trie, int32_t state, StateMask& m) {
  constexpr int K = TokenTrie::kWays;
  const auto& nodes = trie.nodes();
  const auto& splits = trie.splits();
  uint64_t* bits = m.bits.data();
  uint32_t at[K], end[K];
  int32_t* stack[K];
  for (int k = 0; k < K; ++k) {
    at[k] = splits[static_cast<size_t>(k)];
    end[k] = splits[static_cast<size_t>(k) + 1];
    stack[k] = stacks_[static_cast<size_t>(k)].data();
    stack[k][0] = state;
  }
  // The table is read directly (a local pointer the stores cannot alias)
  // and taken again after a transition is computed.
  const int32_t* table = lexer_.table();
  auto step = [&](int k) {
    const uint32_t i = at[k];
    const TokenTrie::Node& n = nodes[i];
    const int32_t from = stack[k][n.depth - 1];
    int32_t t = table[static_cast<size_t>(from) * 256 + n.byte];
    if (t == Lexer::kUnknown) [[unlikely]] {
      t = lexer_.next(from, n.byte);
      table = lexer_.table();
    }
    if (t == Lexer::kDead) [[unlikely]] {
      if (!lexer_.accepted(from).empty()) m.boundaries.push_back({i, from});
      at[k] = n.end;
      return;
    }
    stack[k][n.depth] = t;
    bits[static_cast<uint32_t>(n.token) >> 6] |= uint64_t{1} << (n.token & 63);
    at[k] = i + 1;
  };
  for (;;) {
    bool all = true;
    for (int k = 0; k < K; ++k) all = all && at[k] < end[k];
    if (!all) break;
    for (int k = 0; k < K; ++k) step(k);
  }
  for (int k = 0; k < K; ++k) {
    while (at[k] < end[k]) step(k);
  }
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
