// SuffixDecoding (Oliaro et al. 2024), as a frequency index of contexts:
// for every position of the indexed text, the contexts of length 1..depth
// ending there are counted with the token that followed them. A draft
// extends the sequence token by token with the most frequent continuation
// of its longest indexed context, while that continuation holds at least
// `min_share` of its context's count (a confident path through the suffix
// tree, walked greedily).
//
// Two indexes per lookup: the request's own (prompt and output so far,
// grown as the request grows, dropped when it finishes) and a global one
// over the outputs of recently finished requests, which is what predicts
// repeated agentic and templated answers from earlier ones. The global
// index is bounded: it holds at most `global_tokens` output tokens; adding
// a finished output evicts the oldest outputs (first in, first out) and
// uncounts their contexts, so memory stays proportional to the bound
// (about depth entries per held token).
#include <algorithm>
#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "spec/drafter.h"

namespace tessera::spec {
namespace {

uint64_t mix(uint64_t h, int32_t t) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Context hash -> (next token -> count), and each context's total.
class ContextIndex {
 public:
  explicit ContextIndex(int32_t depth) : depth_(depth) {}

  // Counts (or, with sign -1, uncounts) the contexts ending before position
  // `i` of `t` (i >= 1), each with t[i] as their continuation.
  void count_at(std::span<const int32_t> t, size_t i, int sign) {
    uint64_t h = 0;
    for (int32_t n = 1; n <= depth_ && static_cast<size_t>(n) <= i; ++n) {
      h = mix(h, t[i - static_cast<size_t>(n)]);
      const uint64_t key = mix(h, n);
      Entry& e = index_[key];
      e.total += sign;
      int32_t& c = e.next[t[i]];
      c += sign;
      if (c <= 0) e.next.erase(t[i]);
      if (e.total <= 0) index_.erase(key);
    }
  }
  void add(std::span<const int32_t> t, size_t from, int sign = 1) {
    for (size_t i = std::max<size_t>(from, 1); i < t.size(); ++i) count_at(t, i, sign);
  }
  // The most frequent continuation of the longest indexed context ending at
  // the end of `t` (n >= min_n), with its share of that context's count.
  bool predict(std::span<const int32_t> t, int32_t min_n, int32_t* token, double* share, int32_t* matched) const {
    uint64_t h = 0;
    bool found = false;
    for (int32_t n = 1; n <= depth_ && static_cast<size_t>(n) <= t.size(); ++n) {
      h = mix(h, t[t.size() - static_cast<size_t>(n)]);
      auto it = index_.find(mix(h, n));
      if (it == index_.end()) break;  // longer contexts contain this one: none indexed either
      if (n < min_n) continue;
      int32_t best = -1, best_c = 0;
      for (const auto& [tok, c] : it->second.next) {
        if (c > best_c || (c == best_c && tok < best)) best = tok, best_c = c;
      }
      *token = best;
      *share = static_cast<double>(best_c) / it->second.total;
      *matched = n;
      found = true;
    }
    return found;
  }
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    int32_t total = 0;
    std::unordered_map<int32_t, int32_t> next;
  };
  int32_t depth_;
  std::unordered_map<uint64_t, Entry> index_;
};

class SuffixDrafter final : public Drafter {
 public:
  explicit SuffixDrafter(const SuffixOptions& o) : opt_(o), global_(o.depth) {
    TESSERA_CHECK(o.depth >= 1 && o.depth <= 64 && o.min_n >= 1 && o.min_n <= o.depth && o.min_share > 0.0 &&
                      o.min_share <= 1.0 && o.global_tokens >= 0,
                  kInvalidArgument, "suffix drafter options are invalid (depth {}, min_n {}, min_share {})", o.depth,
                  o.min_n, o.min_share);
  }
  const char* name() const override { return "suffix"; }

  void propose(std::span<const DraftQuery> queries) override {
    for (const DraftQuery& q : queries) {
      q.out->clear();
      Seq& s = seqs_.try_emplace(q.id, opt_.depth).first->second;
      // The request's own index follows its tokens (prompt and output),
      // which only grow: new tokens are appended and indexed (checked at
      // the boundary; anything else starts the index over).
      size_t had = s.tokens.size();
      if (q.tokens.size() < had || (had > 0 && q.tokens[had - 1] != s.tokens.back())) {
        s = Seq(opt_.depth);
        had = 0;
      }
      s.tokens.insert(s.tokens.end(), q.tokens.begin() + static_cast<int64_t>(had), q.tokens.end());
      s.index.add(s.tokens, had);
      if (s.num_prompt < 0) s.num_prompt = q.num_prompt_tokens;
      draft(s, q.max_tokens, q.out);
    }
  }

  void release(uint64_t id) override {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    Seq& s = it->second;
    const size_t from = static_cast<size_t>(std::clamp<int64_t>(s.num_prompt, 0, static_cast<int64_t>(s.tokens.size())));
    if (opt_.global_tokens > 0 && s.tokens.size() > from) {
      std::vector<int32_t> out(s.tokens.begin() + static_cast<int64_t>(from), s.tokens.end());
      if (static_cast<int64_t>(out.size()) > opt_.global_tokens) out.resize(static_cast<size_t>(opt_.global_tokens));
      global_.add(out, 0);
      held_ += static_cast<int64_t>(out.size());
      outputs_.push_back(std::move(out));
      while (held_ > opt_.global_tokens) {  // FIFO eviction
        global_.add(outputs_.front(), 0, -1);
        held_ -= static_cast<int64_t>(outputs_.front().size());
        outputs_.pop_front();
      }
    }
    seqs_.erase(it);
  }

 private:
  struct Seq {
    explicit Seq(int32_t depth) : index(depth) {}
    std::vector<int32_t> tokens;
    int64_t num_prompt = -1;
    ContextIndex index;
  };

  void draft(const Seq& s, int32_t k, std::vector<int32_t>* out) const {
    std::vector<int32_t> ctx(s.tokens.end() - std::min<int64_t>(opt_.depth, static_cast<int64_t>(s.tokens.size())),
                             s.tokens.end());
    while (static_cast<int32_t>(out->size()) < k) {
      // The longer match of the two indexes wins; the request's own on a tie.
      int32_t t_own = -1, t_glob = -1, n_own = 0, n_glob = 0;
      double sh_own = 0, sh_glob = 0;
      const bool own = s.index.predict(ctx, opt_.min_n, &t_own, &sh_own, &n_own);
      const bool glob = global_.predict(ctx, opt_.min_n, &t_glob, &sh_glob, &n_glob);
      if (!own && !glob) break;
      const bool use_own = own && (!glob || n_own >= n_glob);
      const int32_t t = use_own ? t_own : t_glob;
      if ((use_own ? sh_own : sh_glob) < opt_.min_share) break;
      out->push_back(t);
      ctx.push_back(t);
      if (static_cast<int32_t>(ctx.size()) > opt_.depth) ctx.erase(ctx.begin());
    }
  }

  SuffixOptions opt_;
  std::unordered_map<uint64_t, Seq> seqs_;
  ContextIndex global_;
  std::deque<std::vector<int32_t>> outputs_;
  int64_t held_ = 0;
};

}  // namespace

std::unique_ptr<Drafter> make_suffix_drafter(const SuffixOptions& options) {
  return std::make_unique<SuffixDrafter>(options);
}

}  // namespace tessera::spec
