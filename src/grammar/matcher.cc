#include "grammar/matcher.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::grammar {

Matcher::Matcher(std::shared_ptr<const Constraint> constraint, TokenMasker& masker)
    : constraint_(std::move(constraint)), masker_(&masker), parser_(constraint_->tables) {
  for (size_t i = 0; i < constraint_->grammar.lexemes.size(); ++i) {
    const int32_t g = masker.lexer().intern(constraint_->grammar.lexemes[i]);
    global_.push_back(g);
    local_.emplace_back(g, static_cast<int32_t>(i));
  }
  std::sort(local_.begin(), local_.end());
  for (const auto& e : constraint_->grammar.excluded) has_exclusions_ = has_exclusions_ || !e.empty();
  ++masker_->live_matchers;
  starts_.push_back(start_of_expected());
  state_ = starts_.back();
}

Matcher::Matcher(const Matcher& o)
    : constraint_(o.constraint_),
      masker_(o.masker_),
      global_(o.global_),
      local_(o.local_),
      parser_(o.parser_),
      starts_(o.starts_),
      state_(o.state_),
      ended_(o.ended_),
      history_(o.history_),
      has_exclusions_(o.has_exclusions_),
      text_(o.text_),
      lexeme_start_(o.lexeme_start_) {
  ++masker_->live_matchers;
}

Matcher::~Matcher() { --masker_->live_matchers; }

int32_t Matcher::start_of_expected() {
  scratch_.clear();
  for (const int32_t l : parser_.expected()) scratch_.push_back(global_[static_cast<size_t>(l)]);
  if (scratch_.empty()) return Lexer::kDead;
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  return masker_->lexer().start(scratch_);
}

namespace {

std::string_view strip_json_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return s.substr(i);
}

}  // namespace

bool Matcher::excludes(int32_t state) const {
  if (!has_exclusions_) return false;
  for (const int32_t g : masker_->lexer().accepted(state)) {
    auto it = std::lower_bound(local_.begin(), local_.end(), std::make_pair(g, INT32_MIN));
    for (; it != local_.end() && it->first == g; ++it) {
      if (!constraint_->grammar.excluded[static_cast<size_t>(it->second)].empty()) return true;
    }
  }
  return false;
}

template <class Text>
bool Matcher::scan_ended(int32_t state, Text&& text) {
  const auto acc = masker_->lexer().accepted(state);
  if (acc.empty()) return false;
  scratch_.clear();
  std::string t;
  bool have_text = false;
  for (const int32_t g : acc) {
    // Equal regexes share one lexer lexeme but may be several grammar
    // lexemes of this grammar: all of them ended, but those that exclude
    // this text.
    auto it = std::lower_bound(local_.begin(), local_.end(), std::make_pair(g, INT32_MIN));
    for (; it != local_.end() && it->first == g; ++it) {
      const auto& ex = constraint_->grammar.excluded[static_cast<size_t>(it->second)];
      if (!ex.empty()) {
        if (!have_text) {
          t = text();
          have_text = true;
        }
        const std::string_view key = strip_json_space(t);
        if (std::find(ex.begin(), ex.end(), key) != ex.end()) continue;
      }
      scratch_.push_back(it->second);
    }
  }
  if (scratch_.empty()) return false;
  std::sort(scratch_.begin(), scratch_.end());
  if (!parser_.scan(scratch_)) return false;
  starts_.push_back(start_of_expected());
  return true;
}

void Matcher::pop() {
  parser_.pop();
  starts_.pop_back();
}

int32_t Matcher::step(int32_t state, uint8_t byte) {
  if (state == Lexer::kDead) return Lexer::kDead;
  Lexer& lx = masker_->lexer();
  const int32_t t = lx.next(state, byte);
  if (t != Lexer::kDead) return t;
  if (!scan_ended(state, [&] { return text_.substr(lexeme_start_); })) return Lexer::kDead;
  lexeme_start_ = text_.size();  // the next lexeme begins with this byte
  const int32_t s0 = starts_.back();
  return s0 == Lexer::kDead ? Lexer::kDead : lx.next(s0, byte);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  const size_t sets = parser_.num_sets(), text = text_.size(), lexeme_start = lexeme_start_;
  int32_t s = state_;
  for (const char c : bytes) {
    s = step(s, static_cast<uint8_t>(c));
    if (s == Lexer::kDead) {
      while (parser_.num_sets() > sets) pop();
      text_.resize(text);
      lexeme_start_ = lexeme_start;
      return false;
    }
    text_.push_back(c);
  }
  state_ = s;
  return true;
}

bool Matcher::accept(int32_t token) {
  if (ended_ || token < 0 || token >= masker_->n_vocab()) return false;
  const Mark mark{parser_.num_sets(), state_, ended_, text_.size(), lexeme_start_};
  const auto& eog = masker_->eog();
  if (std::find(eog.begin(), eog.end(), token) != eog.end()) {
    if (!can_end()) return false;
    ended_ = true;
  } else {
    const std::string& piece = masker_->piece(token);
    if (piece.empty() || !accept_bytes(piece)) return false;
  }
  history_.push_back(mark);
  return true;
}

void Matcher::rollback(size_t n) {
  TESSERA_ASSERT(n <= history_.size());
  if (n == history_.size()) return;
  const Mark m = history_[n];
  while (parser_.num_sets() > m.sets) pop();
  state_ = m.state;
  ended_ = m.ended;
  text_.resize(m.text);
  lexeme_start_ = m.lexeme_start;
  history_.resize(n);
}

bool Matcher::can_end() {
  if (ended_) return false;
  if (state_ == starts_.back()) return parser_.accepting();
  if (!scan_ended(state_, [&] { return text_.substr(lexeme_start_); })) return false;
  const bool ok = parser_.accepting();
  pop();
  return ok;
}

// `node`'s byte took the lexer to `state` (path_ ends with it): its
// tokens are allowed, and its children are tried from there, across a
// lexeme boundary when one ends.
void Matcher::walk(const TokenTrie& trie, uint32_t node, int32_t state, std::span<uint64_t> bits) {
  const auto& nodes = trie.nodes();
  const TokenTrie::Node& n = nodes[node];
  set_bit(bits, n.token);
  Lexer& lx = masker_->lexer();
  int pushed = -1;  // -1: not tried; 0: the lexeme cannot end here; 1: pushed
  const int32_t start = walk_start_;
  for (uint32_t c = node + 1; c < n.end; c = nodes[c].end) {
    const int32_t t = lx.next(state, nodes[c].byte);
    if (t != Lexer::kDead) {
      path_.push_back(static_cast<char>(nodes[c].byte));
      walk(trie, c, t, bits);
      path_.pop_back();
      continue;
    }
    if (pushed < 0) {
      pushed = scan_ended(state, [&] {
                 return start < 0 ? text_.substr(lexeme_start_) + path_ : path_.substr(static_cast<size_t>(start));
               })
                   ? 1
                   : 0;
    }
    if (pushed == 0 || starts_.back() == Lexer::kDead) continue;
    const int32_t t2 = lx.next(starts_.back(), nodes[c].byte);
    if (t2 == Lexer::kDead) continue;
    walk_start_ = static_cast<int32_t>(path_.size());  // the next lexeme begins with c's byte
    path_.push_back(static_cast<char>(nodes[c].byte));
    walk(trie, c, t2, bits);
    path_.pop_back();
    walk_start_ = start;
  }
  if (pushed == 1) pop();
}

// The tokens that cross a lexeme boundary: per state left, the parser takes
// the ended lexemes once and each boundary node's subtree is walked on (one
// node at a time where an ended lexeme excludes texts: they differ by node).
void Matcher::walk_boundaries(const TokenTrie& trie, const StateMask& sm, std::span<uint64_t> bits) {
  const auto& nodes = trie.nodes();
  Lexer& lx = masker_->lexer();
  auto walk_from = [&](uint32_t node) {
    const int32_t s0 = starts_.back();
    if (s0 == Lexer::kDead) return;
    const int32_t t = lx.next(s0, nodes[node].byte);
    if (t == Lexer::kDead) return;
    path_ = trie.path_to(node);
    walk_start_ = static_cast<int32_t>(path_.size()) - 1;
    walk(trie, node, t, bits);
  };
  for (size_t i = 0; i < sm.boundaries.size();) {
    const int32_t from = sm.boundaries[i].from;
    size_t j = i;
    while (j < sm.boundaries.size() && sm.boundaries[j].from == from) ++j;
    if (excludes(from)) {
      for (size_t k = i; k < j; ++k) {
        const uint32_t node = sm.boundaries[k].node;
        const std::string before = trie.path_to(node);  // the lexeme's tail: all but the node's byte
        if (scan_ended(from, [&] { return text_.substr(lexeme_start_) + before.substr(0, before.size() - 1); })) {
          walk_from(node);
          pop();
        }
      }
    } else if (scan_ended(from, [] { return std::string(); })) {
      for (size_t k = i; k < j; ++k) walk_from(sm.boundaries[k].node);
      pop();
    }
    i = j;
  }
  walk_start_ = -1;
  finish_mask(trie, bits);
}

void Matcher::fill_mask(std::span<uint64_t> bits) {
  TESSERA_ASSERT(bits.size() == masker_->n_words());
  std::fill(bits.begin(), bits.end(), 0);
  if (ended_) return;
  if (state_ != Lexer::kDead) {
    const StateMask& a = masker_->state_mask(TokenMasker::kShort, state_);
    const StateMask& b = masker_->state_mask(TokenMasker::kLong, state_);
    for (size_t w = 0; w < bits.size(); ++w) bits[w] = a.bits[w] | b.bits[w];
    walk_boundaries(masker_->trie(a.trie), a, bits);
    walk_boundaries(masker_->trie(b.trie), b, bits);
  }
  if (can_end()) {
    for (const int32_t e : masker_->eog()) set_bit(bits, e);
  }
}

}  // namespace tessera::grammar
