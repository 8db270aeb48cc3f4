#include "grammar/lexer.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"

namespace tessera::grammar {

namespace {

constexpr size_t kMaxNfaStates = 4u << 20;
constexpr size_t kMaxLexemeStates = 1u << 18;  // one pattern's share

std::string key_of(std::span<const int32_t> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
}

}  // namespace

int32_t Lexer::new_nfa_state() {
  TESSERA_CHECK(nfa_.size() - lexeme_first_ < kMaxLexemeStates, kInvalidArgument,
                "structured output: a pattern needs more than {} automaton states (counted repetitions too large)",
                kMaxLexemeStates);
  TESSERA_CHECK(nfa_.size() < kMaxNfaStates, kInvalidArgument,
                "structured output: the patterns need more than {} automaton states (counted repetitions too large)",
                kMaxNfaStates);
  nfa_.emplace_back();
  tags_.emplace_back();
  return static_cast<int32_t>(nfa_.size() - 1);
}

int32_t Lexer::emit(const Regex& r, int32_t from) {
  switch (r.kind) {
    case Regex::Kind::kEmpty: return from;
    case Regex::Kind::kSet: {
      const int32_t to = new_nfa_state();
      for (const auto& [lo, hi] : r.set.ranges()) {
        for (const ByteRanges& seq : utf8_sequences(lo, hi)) {
          int32_t cur = from;
          for (size_t i = 0; i + 1 < seq.size(); ++i) {
            const int32_t n = new_nfa_state();
            nfa_[static_cast<size_t>(cur)].edges.push_back({seq[i].first, seq[i].second, n});
            cur = n;
          }
          nfa_[static_cast<size_t>(cur)].edges.push_back({seq.back().first, seq.back().second, to});
        }
      }
      return to;
    }
    case Regex::Kind::kSeq: {
      int32_t cur = from;
      for (const auto& k : r.kids) cur = emit(*k, cur);
      return cur;
    }
    case Regex::Kind::kAlt: {
      const int32_t to = new_nfa_state();
      for (const auto& k : r.kids) {
        const int32_t s = new_nfa_state();
        nfa_[static_cast<size_t>(from)].eps.push_back(s);
        const int32_t e = emit(*k, s);
        nfa_[static_cast<size_t>(e)].eps.push_back(to);
      }
      return to;
    }
    case Regex::Kind::kRepeat: {
      const Regex& kid = *r.kids[0];
      // Long repetitions tag their copies (mask classes, set_horizon);
      // repetitions of a plain-text character (add_plain_kid) always do,
      // stars included (plain_budget).
      const int32_t copies = r.max < 0 ? r.min : r.max;
      const bool plain = !plain_kids_.empty() && plain_kids_.count(regex_key(kid)) > 0;
      const bool tagged = plain || (copies >= 8 && !nullable(kid));  // each copy takes a byte or more
      const auto rid = static_cast<int32_t>(repeats_.size());
      if (tagged) repeats_.push_back({r.min, r.max, plain, {}});
      int32_t copy = 0;
      auto emit_copy = [&](int32_t at, int32_t index) {
        const size_t first = nfa_.size();
        const int32_t end = emit(kid, at);
        if (tagged) {
          for (size_t x = first; x < nfa_.size(); ++x) {
            if (tags_[x].repeat < 0) tags_[x] = {rid, index, static_cast<int32_t>(x - first)};
          }
          if (plain && repeats_[static_cast<size_t>(rid)].entry.empty()) {
            repeats_[static_cast<size_t>(rid)].entry = entry_offsets(at, static_cast<int32_t>(first));
          }
        }
        return end;
      };
      int32_t cur = from;
      for (int32_t i = 0; i < r.min; ++i) cur = emit_copy(cur, copy++);
      if (r.max < 0) {
        const int32_t loop = new_nfa_state();
        nfa_[static_cast<size_t>(cur)].eps.push_back(loop);
        const int32_t e = emit_copy(loop, kStarCopy);
        nfa_[static_cast<size_t>(e)].eps.push_back(loop);
        return loop;
      }
      const int32_t end = new_nfa_state();
      nfa_[static_cast<size_t>(cur)].eps.push_back(end);
      for (int32_t i = r.min; i < r.max; ++i) {
        cur = emit_copy(cur, copy++);
        nfa_[static_cast<size_t>(cur)].eps.push_back(end);
      }
      return end;
    }
  }
  return from;
}

// Offsets (from `first`) of the states with edges that `at` reaches by
// epsilon inside the copy that starts at `first`: where a character starts.
std::vector<int32_t> Lexer::entry_offsets(int32_t at, int32_t first) const {
  std::vector<int32_t> out, stack;
  std::vector<int32_t> seen;
  for (const int32_t t : nfa_[static_cast<size_t>(at)].eps) {
    if (t >= first) stack.push_back(t);
  }
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), x) != seen.end()) continue;
    seen.push_back(x);
    if (!nfa_[static_cast<size_t>(x)].edges.empty()) out.push_back(x - first);
    for (const int32_t t : nfa_[static_cast<size_t>(x)].eps) {
      if (t >= first) stack.push_back(t);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Drops the edges of states [first, end) into states that cannot reach
// `final`: every state left can finish the lexeme.
void Lexer::prune(int32_t first, int32_t final) {
  const size_t n = nfa_.size() - static_cast<size_t>(first);
  std::vector<std::vector<int32_t>> rev(n);
  for (size_t i = 0; i < n; ++i) {
    const NfaState& s = nfa_[static_cast<size_t>(first) + i];
    for (const Edge& e : s.edges) rev[static_cast<size_t>(e.to - first)].push_back(static_cast<int32_t>(i));
    for (const int32_t t : s.eps) rev[static_cast<size_t>(t - first)].push_back(static_cast<int32_t>(i));
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> stack{final - first};
  live[static_cast<size_t>(final - first)] = 1;
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    for (const int32_t p : rev[static_cast<size_t>(x)]) {
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        stack.push_back(p);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    NfaState& s = nfa_[static_cast<size_t>(first) + i];
    std::erase_if(s.edges, [&](const Edge& e) { return !live[static_cast<size_t>(e.to - first)]; });
    std::erase_if(s.eps, [&](int32_t t) { return !live[static_cast<size_t>(t - first)]; });
  }
}

int32_t Lexer::intern(const RegexPtr& re) {
  std::string key = regex_key(*re);
  if (auto it = lexeme_ids_.find(key); it != lexeme_ids_.end()) return it->second;
  TESSERA_CHECK(has_nonempty(*re), kInvalidArgument, "structured output: a pattern matches no non-empty text");
  const size_t mark = nfa_.size();
  const int32_t id = static_cast<int32_t>(lexeme_start_.size());
  try {
    lexeme_first_ = mark;
    const int32_t s0 = new_nfa_state();
    const int32_t final = emit(*re, s0);
    nfa_[static_cast<size_t>(final)].accept = id;
    prune(s0, final);
    // A start without "": the byte edges of s0's closure, nothing else.
    std::vector<int32_t> closure{s0};
    close(closure);
    const int32_t start = new_nfa_state();
    for (const int32_t x : closure) {
      for (const Edge& e : nfa_[static_cast<size_t>(x)].edges) nfa_[static_cast<size_t>(start)].edges.push_back(e);
    }
  } catch (...) {
    nfa_.resize(mark);
    tags_.resize(mark);
    throw;
  }
  lexeme_start_.push_back(static_cast<int32_t>(nfa_.size() - 1));
  lexeme_ids_.emplace(std::move(key), id);
  return id;
}

void Lexer::close(std::vector<int32_t>& set) {
  if (mark_.size() < nfa_.size()) mark_.resize(nfa_.size(), 0);
  if (++generation_ == 0) {
    std::fill(mark_.begin(), mark_.end(), 0);
    generation_ = 1;
  }
  for (const int32_t x : set) mark_[static_cast<size_t>(x)] = generation_;
  for (size_t i = 0; i < set.size(); ++i) {
    for (const int32_t t : nfa_[static_cast<size_t>(set[i])].eps) {
      if (mark_[static_cast<size_t>(t)] != generation_) {
        mark_[static_cast<size_t>(t)] = generation_;
        set.push_back(t);
      }
    }
  }
  // Only states with edges or an accept matter: the rest are pure epsilon
  // hubs, and dropping them merges DFA states with the same future.
  std::erase_if(set, [&](int32_t x) {
    const NfaState& s = nfa_[static_cast<size_t>(x)];
    return s.edges.empty() && s.accept < 0;
  });
  std::sort(set.begin(), set.end());
}

int32_t Lexer::intern_state(std::vector<int32_t> set) {
  if (set.empty()) return kDead;
  std::string key = key_of(set);
  if (auto it = state_ids_.find(key); it != state_ids_.end()) return it->second;
  DfaState d;
  for (const int32_t x : set) {
    if (nfa_[static_cast<size_t>(x)].accept >= 0) d.accepted.push_back(nfa_[static_cast<size_t>(x)].accept);
  }
  std::sort(d.accepted.begin(), d.accepted.end());
  d.accepted.erase(std::unique(d.accepted.begin(), d.accepted.end()), d.accepted.end());
  const auto id = static_cast<int32_t>(states_.size());
  // The mask class: tagged states by (repeat, offset, distance to the
  // count's minimum and maximum, clamped at the horizon), others by id.
  std::vector<int32_t> cls;
  for (const int32_t x : set) {
    const CopyTag& t = tags_[static_cast<size_t>(x)];
    if (t.repeat < 0) {
      cls.insert(cls.end(), {x, 0, 0, 0});
      continue;
    }
    const Repeat& r = repeats_[static_cast<size_t>(t.repeat)];
    const int32_t to_min = std::clamp(r.min - t.copy, -1, horizon_);
    const int32_t to_max = r.max < 0 ? horizon_ : std::clamp(r.max - t.copy, -1, horizon_);
    cls.insert(cls.end(), {-1 - t.repeat, t.offset, to_min, to_max});
  }
  {
    std::vector<std::array<int32_t, 4>> tuples(cls.size() / 4);
    std::memcpy(tuples.data(), cls.data(), cls.size() * sizeof(int32_t));
    std::sort(tuples.begin(), tuples.end());
    std::memcpy(cls.data(), tuples.data(), cls.size() * sizeof(int32_t));
  }
  d.plain_budget = plain_budget_of(set);
  auto [it, fresh] = class_ids_.emplace(key_of(cls), id);
  d.mask_class = fresh ? id : it->second;
  d.nfa = std::move(set);
  next_.resize(next_.size() + 256, kUnknown);
  states_.push_back(std::move(d));
  state_ids_.emplace(std::move(key), id);
  return id;
}

// Between two characters of one plain repetition, and nothing else that
// takes a plain byte: the characters left (kUnbounded for a star), else -1.
int32_t Lexer::plain_budget_of(const std::vector<int32_t>& set) const {
  int32_t rid = -1, copy = -1;
  std::vector<int32_t> offsets;
  for (const int32_t x : set) {
    const CopyTag& t = tags_[static_cast<size_t>(x)];
    if (t.repeat < 0) {
      for (const Edge& e : nfa_[static_cast<size_t>(x)].edges) {
        for (int b = e.lo; b <= e.hi; ++b) {
          if (plain_lead_[static_cast<size_t>(b)]) return -1;
        }
      }
      continue;
    }
    if (!repeats_[static_cast<size_t>(t.repeat)].plain) return -1;
    if (rid < 0) {
      rid = t.repeat;
      copy = t.copy;
    } else if (rid != t.repeat || copy != t.copy) {
      return -1;
    }
    offsets.push_back(t.offset);
  }
  if (rid < 0) return -1;
  std::sort(offsets.begin(), offsets.end());
  const Repeat& r = repeats_[static_cast<size_t>(rid)];
  if (offsets != r.entry) return -1;
  if (copy == kStarCopy || r.max < 0) return kUnbounded;
  return r.max - copy;
}

void Lexer::add_plain_kid(const RegexPtr& kid, const CodepointSet& chars) {
  plain_kids_.insert(regex_key(*kid));
  for (const auto& [lo, hi] : chars.ranges()) {
    for (const ByteRanges& seq : utf8_sequences(lo, hi)) {
      for (int b = seq[0].first; b <= seq[0].second; ++b) plain_lead_[static_cast<size_t>(b)] = 1;
    }
  }
}

int32_t Lexer::start(std::span<const int32_t> lexemes) {
  std::string key = key_of(lexemes);
  if (auto it = start_ids_.find(key); it != start_ids_.end()) return it->second;
  std::vector<int32_t> set;
  for (const int32_t l : lexemes) set.push_back(lexeme_start_[static_cast<size_t>(l)]);
  close(set);
  const int32_t id = intern_state(std::move(set));
  start_ids_.emplace(std::move(key), id);
  return id;
}

int32_t Lexer::compute_next(int32_t state, uint8_t byte) {
  std::vector<int32_t> set;
  for (const int32_t x : states_[static_cast<size_t>(state)].nfa) {
    for (const Edge& e : nfa_[static_cast<size_t>(x)].edges) {
      if (e.lo <= byte && byte <= e.hi) set.push_back(e.to);
    }
  }
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
  close(set);
  const int32_t t = intern_state(std::move(set));
  next_[static_cast<size_t>(state) * 256 + byte] = t;
  return t;
}

size_t Lexer::memory_bytes() const {
  size_t b = nfa_.size() * sizeof(NfaState) + states_.size() * sizeof(DfaState) + next_.capacity() * sizeof(int32_t);
  for (const NfaState& s : nfa_) b += s.edges.capacity() * sizeof(Edge) + s.eps.capacity() * sizeof(int32_t);
  for (const DfaState& s : states_) b += (s.nfa.capacity() + s.accepted.capacity()) * sizeof(int32_t);
  return b;
}

}  // namespace tessera::grammar
