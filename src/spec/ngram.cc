// Prompt lookup decoding (Saxena 2023; vLLM's and llama.cpp's "ngram"): the
// last n tokens of a sequence are looked up earlier in the same sequence
// (prompt and output), longest n first, latest occurrence first; the tokens
// that followed that occurrence are the proposal. Copying text (quoting,
// editing, code, templated answers) makes these right most of the time.
#include <algorithm>

#include "core/error.h"
#include "spec/drafter.h"

namespace tessera::spec {
namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& o) : opt_(o) {
    TESSERA_CHECK(o.min_n >= 1 && o.max_n >= o.min_n, kInvalidArgument, "n-gram sizes {}..{} are invalid", o.min_n,
                  o.max_n);
  }
  const char* name() const override { return "ngram"; }

  void propose(std::span<const DraftQuery> queries) override {
    for (const DraftQuery& q : queries) {
      q.out->clear();
      if (q.max_tokens > 0) lookup(q.tokens, q.max_tokens, q.out);
    }
  }

 private:
  void lookup(std::span<const int32_t> t, int32_t k, std::vector<int32_t>* out) const {
    const int64_t len = static_cast<int64_t>(t.size());
    for (int64_t n = std::min<int64_t>(opt_.max_n, len - 1); n >= opt_.min_n; --n) {
      const std::span<const int32_t> suffix = t.subspan(static_cast<size_t>(len - n));
      // Latest earlier occurrence whose continuation exists: start j, with
      // j + n < len (the suffix itself is not a match).
      for (int64_t j = len - n - 1; j >= 0; --j) {
        if (t[static_cast<size_t>(j)] != suffix[0] ||
            !std::equal(suffix.begin(), suffix.end(), t.begin() + j)) {
          continue;
        }
        const int64_t from = j + n, to = std::min(len, from + k);
        out->assign(t.begin() + from, t.begin() + to);
        return;
      }
    }
  }

  NgramOptions opt_;
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& options) {
  return std::make_unique<NgramDrafter>(options);
}

Method parse_method(const std::string& name) {
  if (name == "none" || name.empty()) return Method::kNone;
  if (name == "ngram") return Method::kNgram;
  if (name == "suffix") return Method::kSuffix;
  if (name == "draft") return Method::kDraft;
  if (name == "layers") return Method::kLayers;
  fail(ErrorCode::kInvalidArgument, "unknown speculative method '{}' (known: none, ngram, suffix, draft, layers)", name);
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kNone: return "none";
    case Method::kNgram: return "ngram";
    case Method::kSuffix: return "suffix";
    case Method::kDraft: return "draft";
    case Method::kLayers: return "layers";
  }
  return "?";
}

}  // namespace tessera::spec
