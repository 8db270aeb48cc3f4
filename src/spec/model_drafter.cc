#include "spec/model_drafter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/cpu.h"
#include "core/error.h"
#include "kv/kv_manager.h"
#include "model/kv_cache.h"

namespace tessera::spec {
namespace {

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// One sequence's cache in the drafter.
struct DraftSeq {
  kv::BlockTable table;
  std::vector<int32_t> tokens;  // the tokens whose K/V the table holds, in order
};

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(const Model& model, const ModelDrafterOptions& o, ThreadPool& pool)
      : model_(model),
        opt_(o),
        kv_({o.block_size, blocks_for(o)}),
        cache_(model.config(), {blocks_for(o), o.block_size, o.kv_type, o.kv_hadamard, model.key_mean()}) {
    TESSERA_CHECK(o.block_size > 0 && o.max_batch_tokens > 0, kInvalidArgument, "bad drafter cache options");
    state_.ctx.pool = &pool;
    state_.ctx.isa = active_isa();
    state_.ctx.ws = &state_.ws;
    batch_.skip_layers = o.skip_layers;
  }

  const char* name() const override { return opt_.skip_layers.empty() ? "draft" : "layers"; }
  bool costly() const override { return true; }

  void release(uint64_t id) override {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    kv_.free(it->second.table);
    seqs_.erase(it);
  }

  int64_t uncomputed_tokens(uint64_t id, std::span<const int32_t> tokens) const override {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || tokens.empty()) return static_cast<int64_t>(tokens.size());
    return static_cast<int64_t>(tokens.size() - kept_prefix(it->second, tokens));
  }

  void propose(std::span<const DraftQuery> queries) override {
    active_.clear();
    for (const DraftQuery& q : queries) {
      q.out->clear();
      if (q.max_tokens <= 0 || q.tokens.empty()) continue;
      DraftSeq& s = seqs_[q.id];
      const size_t c = kept_prefix(s, q.tokens);
      if (c < s.tokens.size()) {
        kv_.truncate(s.table, static_cast<int64_t>(c));
        s.tokens.resize(c);
      }
      active_.push_back({&q, &s, true});
    }
    if (active_.empty()) return;
    make_room(queries);
    catch_up();
    // Each further draft position: one forward pass, one token per sequence.
    for (;;) {
      batch_.clear();
      rows_.clear();
      for (Active& a : active_) {
        if (!a.alive || static_cast<int32_t>(a.q->out->size()) >= a.q->max_tokens) continue;
        if (!append(a, std::span(&a.q->out->back(), 1))) continue;
        rows_.push_back(&a);
        batch_.logit_rows.push_back(static_cast<int32_t>(batch_.tokens.size() - 1));
      }
      if (rows_.empty()) break;
      run_and_pick();
    }
  }

 private:
  struct Active {
    const DraftQuery* q;
    DraftSeq* s;
    bool alive;
  };

  // The cached tokens a proposal for `tokens` (not empty) keeps: the longest
  // common prefix with the real tokens (last step's rejected drafts go),
  // but never the last token: its row is the first draft's logits.
  static size_t kept_prefix(const DraftSeq& s, std::span<const int32_t> tokens) {
    const size_t c = std::mismatch(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end()).first - s.tokens.begin();
    return std::min(c, tokens.size() - 1);
  }

  static int32_t blocks_for(const ModelDrafterOptions& o) {
    const int64_t blocks = (std::max<int64_t>(o.capacity_tokens, o.block_size) + o.block_size - 1) / o.block_size;
    return static_cast<int32_t>(blocks + 1);  // + the null block
  }

  // Frees the caches of sequences not asking this step when the pool could
  // not hold what this step needs.
  void make_room(std::span<const DraftQuery> queries) {
    int64_t need = 0;
    for (const Active& a : active_) {
      need += kv_.blocks_needed(a.s->table, static_cast<int64_t>(a.q->tokens.size()) + a.q->max_tokens);
    }
    if (need <= kv_.pool().num_free()) return;
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      const bool asking = std::any_of(queries.begin(), queries.end(), [&](const DraftQuery& q) { return q.id == it->first; });
      if (asking) {
        ++it;
      } else {
        kv_.free(it->second.table);
        it = seqs_.erase(it);
      }
    }
  }

  // Adds tokens at the end of a's cache to the batch (reserving their
  // slots); false (and a drafts nothing more) when the pool is short.
  bool append(Active& a, std::span<const int32_t> tokens) {
    const int64_t start = static_cast<int64_t>(a.s->tokens.size());
    const int64_t end = start + static_cast<int64_t>(tokens.size());
    std::vector<kv::CopyOp> copies;
    if (!kv_.reserve(a.s->table, end, copies)) {
      a.alive = false;
      return false;
    }
    TESSERA_ASSERT(copies.empty());  // a drafter's blocks are never shared
    const int32_t q_begin = static_cast<int32_t>(batch_.tokens.size());
    for (int64_t p = start; p < end; ++p) {
      batch_.tokens.push_back(tokens[static_cast<size_t>(p - start)]);
      batch_.positions.push_back(static_cast<int32_t>(p));
      batch_.slots.push_back(a.s->table.slot(p, kv_.block_size()));
    }
    batch_.seqs.push_back({q_begin, static_cast<int32_t>(end - start), static_cast<int32_t>(end), nullptr});
    a.s->tokens.insert(a.s->tokens.end(), tokens.begin(), tokens.end());
    return true;
  }

  // Block-table pointers are taken once the batch is complete (a table's
  // vector may have grown while later sequences were appended).
  void fix_tables() {
    size_t i = 0;
    for (Active* a : batch_owners_) batch_.seqs[i++].block_table = a->s->table.blocks.data();
  }

  // Computes every sequence's tokens up to its last; the last token's row
  // gives its first draft.
  void catch_up() {
    for (;;) {
      batch_.clear();
      rows_.clear();
      batch_owners_.clear();
      int64_t budget = opt_.max_batch_tokens;
      for (Active& a : active_) {
        if (!a.alive || !a.q->out->empty() || budget == 0) continue;
        const size_t have = a.s->tokens.size();
        const size_t n = a.q->tokens.size();
        const size_t take = std::min<size_t>(n - have, static_cast<size_t>(budget));
        if (!append(a, a.q->tokens.subspan(have, take))) continue;
        batch_owners_.push_back(&a);
        budget -= static_cast<int64_t>(take);
        if (have + take == n) {
          rows_.push_back(&a);
          batch_.logit_rows.push_back(static_cast<int32_t>(batch_.tokens.size() - 1));
        }
      }
      if (batch_.tokens.empty()) return;
      fix_tables();
      run_and_pick(/*tables_fixed=*/true);
    }
  }

  void run_and_pick(bool tables_fixed = false) {
    if (!tables_fixed) {
      batch_owners_.assign(rows_.begin(), rows_.end());
      fix_tables();
    }
    model_.forward(batch_, cache_, state_);
    const int64_t V = model_.config().n_vocab;
    for (size_t r = 0; r < rows_.size(); ++r) rows_[r]->q->out->push_back(argmax(state_.logits.data() + r * V, V));
  }

  const Model& model_;
  ModelDrafterOptions opt_;
  kv::KvManager kv_;
  KvCache cache_;
  ForwardState state_;
  ForwardBatch batch_;
  std::unordered_map<uint64_t, DraftSeq> seqs_;
  std::vector<Active> active_;
  std::vector<Active*> rows_;          // the sequences of this pass's logit rows, in order
  std::vector<Active*> batch_owners_;  // the sequences of batch_.seqs, in order
};

}  // namespace

std::unique_ptr<Drafter> make_model_drafter(const Model& model, const ModelDrafterOptions& options, ThreadPool& pool) {
  TESSERA_CHECK(options.skip_layers.empty() || static_cast<int64_t>(options.skip_layers.size()) == model.config().n_layer,
                kInvalidArgument, "a layer mask of {} for a model of {} layers", options.skip_layers.size(),
                model.config().n_layer);
  return std::make_unique<ModelDrafter>(model, options, pool);
}

std::vector<uint8_t> parse_layer_list(const std::string& list, int64_t n_layer) {
  std::vector<uint8_t> mask(static_cast<size_t>(n_layer), 0);
  auto number = [&](std::string_view s) {
    int64_t v = -1;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    TESSERA_CHECK(ec == std::errc() && p == s.data() + s.size(), kInvalidArgument,
                  "--draft-layers: '{}' is not a layer index", s);
    TESSERA_CHECK(v >= 0 && v < n_layer, kInvalidArgument, "--draft-layers: layer {} out of range (the model has {})",
                  v, n_layer);
    return v;
  };
  std::string_view rest = list;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t dash = item.find('-');
    const int64_t lo = number(item.substr(0, dash));
    const int64_t hi = dash == std::string_view::npos ? lo : number(item.substr(dash + 1));
    TESSERA_CHECK(lo <= hi, kInvalidArgument, "--draft-layers: empty range '{}'", item);
    for (int64_t l = lo; l <= hi; ++l) mask[static_cast<size_t>(l)] = 1;
  }
  TESSERA_CHECK(std::count(mask.begin(), mask.end(), 0) > 0, kInvalidArgument,
                "--draft-layers '{}' skips every layer of {}", list, n_layer);
  TESSERA_CHECK(std::count(mask.begin(), mask.end(), 1) > 0, kInvalidArgument, "--draft-layers is empty");
  return mask;
}

const char* const kLayerProbeText =
    "Once upon a time, in a small town by the sea, there lived a girl named Mia. Every morning she walked to the "
    "harbor with her dog to watch the fishing boats come home. One day she found a small wooden box on the sand. "
    "Inside was a map and a note that said: \"Follow the path to the old lighthouse.\" Mia was curious, so she "
    "asked her friend Tom to come with her. They packed some bread, apples and water, and set off along the cliffs. "
    "The wind was strong and the sky turned grey, but they did not give up. When they reached the lighthouse, the "
    "door was open. At the top of the stairs they found an old man who had been waiting for someone to find his "
    "map. He smiled and told them the story of the town, of the storms and the ships, and of the people who had "
    "kept the light burning for a hundred years. Mia and Tom listened until the sun went down, and then they "
    "walked home together, happy and tired.";

namespace {

// The argmax of every position of `text` (teacher forced, one forward pass,
// `skip` layers left out), at most the model's trained context.
std::vector<int32_t> teacher_forced_argmax(const Model& model, ThreadPool& pool, std::span<const int32_t> text,
                                           const std::vector<uint8_t>& skip) {
  const int64_t V = model.config().n_vocab;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(text.size()), model.config().n_ctx_train);
  if (n <= 0) return {};
  const int32_t bs = 16;
  const int32_t blocks = static_cast<int32_t>((n + bs - 1) / bs + 1);
  kv::KvManager kv({bs, blocks});
  KvCache cache(model.config(), {blocks, bs, DType::kF32});
  ForwardState st;
  st.ctx.pool = &pool;
  st.ctx.isa = active_isa();
  st.ctx.ws = &st.ws;
  kv::BlockTable table;
  std::vector<kv::CopyOp> copies;
  const bool reserved = kv.reserve(table, n, copies);
  TESSERA_ASSERT(reserved);
  (void)reserved;
  ForwardBatch b;
  b.skip_layers = skip;
  for (int64_t p = 0; p < n; ++p) {
    b.tokens.push_back(text[static_cast<size_t>(p)]);
    b.positions.push_back(static_cast<int32_t>(p));
    b.slots.push_back(table.slot(p, bs));
    b.logit_rows.push_back(static_cast<int32_t>(p));
  }
  b.seqs.push_back({0, static_cast<int32_t>(n), static_cast<int32_t>(n), table.blocks.data()});
  model.forward(b, cache, st);
  std::vector<int32_t> picks(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) picks[static_cast<size_t>(p)] = argmax(st.logits.data() + p * V, V);
  return picks;
}

// The share of positions where two argmax sequences agree (over the shorter).
double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n == 0) return 0.0;
  const int64_t agree = std::inner_product(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin(), int64_t{0},
                                           std::plus<>(), std::equal_to<>());
  return static_cast<double>(agree) / static_cast<double>(n);
}

}  // namespace

double measure_agreement(const Model& target, const Model& draft, const std::vector<uint8_t>& draft_skip,
                         ThreadPool& pool, std::span<const int32_t> text) {
  TESSERA_CHECK(target.config().n_vocab == draft.config().n_vocab, kInvalidArgument,
                "agreement needs one vocabulary ({} vs {} tokens)", target.config().n_vocab, draft.config().n_vocab);
  return agreement(teacher_forced_argmax(target, pool, text, {}), teacher_forced_argmax(draft, pool, text, draft_skip));
}

LayerChoice choose_layers_to_skip(const Model& model, ThreadPool& pool, std::span<const int32_t> text) {
  const int64_t L = model.config().n_layer;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(text.size()), model.config().n_ctx_train);
  LayerChoice best;
  best.predicted_speedup = 0.0;
  if (L < 3 || n < 8) return best;
  // The text in one forward pass: the full model, then each candidate.
  const std::vector<int32_t> target = teacher_forced_argmax(model, pool, text, {});
  // Agreement: how often a candidate's argmax is the target's, position by
  // position (what greedy verification accepts).
  const int64_t middle_lo = 1, middle_hi = L - 1;  // first and last layers stay
  std::vector<int64_t> lengths{std::max<int64_t>(1, (L + 3) / 4), std::max<int64_t>(1, (L + 1) / 3), L / 2};
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  for (int64_t len : lengths) {
    for (int64_t lo = middle_lo; lo + len <= middle_hi; lo += std::max<int64_t>(1, len / 2)) {
      std::vector<uint8_t> skip(static_cast<size_t>(L), 0);
      std::fill(skip.begin() + lo, skip.begin() + lo + len, 1);
      const double a = std::min(0.999, agreement(teacher_forced_argmax(model, pool, text, skip), target));
      const double c = static_cast<double>(L - len) / static_cast<double>(L);
      double speedup = 0.0;
      for (int64_t k = 1; k <= 8; ++k) {
        speedup = std::max(speedup, (1.0 - std::pow(a, k + 1)) / ((1.0 - a) * (c * k + 1.0)));
      }
      if (best.skip.empty() || speedup > best.predicted_speedup) best = {skip, a, speedup};
    }
  }
  if (best.predicted_speedup <= 1.0) best.skip.clear();
  return best;
}

}  // namespace tessera::spec
